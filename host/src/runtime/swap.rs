//! Whether the pool may reset slots with `PAGEMAP_SCAN`: only where the
//! host has no swap.
//!
//! wasmtime 48's scan asks the kernel for the pages an attempt wrote *that
//! are present*. A written page the kernel swapped out is not present, so
//! the reset neither restored nor discarded it, and the next attempt in the
//! slot — any plugin, any tenant — read it back from swap as the previous
//! attempt left it. Measured with `scripts/swap-experiment`
//! (docs/SECURITY.md, *One attempt's memory and the next*). Without the
//! scan, the pool copies the image over the whole kept-resident part (which
//! pages swapped pages in, then overwrites them) and discards the rest with
//! `madvise`, which drops swapped pages too: no leak, at the cost measured
//! in docs/PERFORMANCE.md (*wasmtime 50 measured*; the same cost wasmtime
//! 50's own fix has on this kernel).
//!
//! Swap is read from `/proc/swaps` when the engines are built, at start.
//! Swap turned on later is not seen: docs/OPERATIONS.md tells operators to
//! restart ax after `swapon`.

/// Where the kernel lists the active swap areas.
const PROC_SWAPS: &str = "/proc/swaps";

/// Whether the pool may use `PAGEMAP_SCAN`: asked for (`wanted`) and no swap
/// area active. Says why in the log when it turns the scan off.
pub(super) fn pagemap_scan_allowed(wanted: bool) -> bool {
    if !wanted {
        return false;
    }
    let areas = std::fs::read_to_string(PROC_SWAPS).map_or(0, |text| active_areas(&text));
    // Said once: a tiered runtime builds two engines, tests many runtimes.
    static SAID: std::sync::Once = std::sync::Once::new();
    if areas > 0 {
        SAID.call_once(|| {
            tracing::warn!(
            swap_areas = areas,
                "swap is on: pooled slots are reset without PAGEMAP_SCAN, which would leave a swapped-out page of one attempt to the next (docs/SECURITY.md)"
            );
        });
    }
    areas == 0
}

/// The swap areas `/proc/swaps` lists: one line each after its header.
fn active_areas(proc_swaps: &str) -> usize {
    proc_swaps
        .lines()
        .skip(1)
        .filter(|line| !line.trim().is_empty())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_areas_are_the_lines_after_the_header() {
        let none = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert_eq!(active_areas(none), 0);
        assert_eq!(active_areas(""), 0);
        let two = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                   /swapfile                               file\t\t262140\t\t0\t\t-2\n\
                   /dev/vdb                                partition\t1048572\t\t0\t\t-3\n";
        assert_eq!(active_areas(two), 2);
    }

    #[test]
    fn the_scan_is_never_turned_on_when_not_asked_for() {
        assert!(!pagemap_scan_allowed(false));
    }
}
