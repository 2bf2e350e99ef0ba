//! Tenant quotas as the actor applies them: a changed tenant record, and
//! pushing a tenant's limits and holds to the dispatch queue.

use super::{Actor, Timer};
use crate::scheduler::quota::{TenantQuota, WindowUse};
use crate::tenant::TenantRecord;

impl Actor {
    /// Applies a created or changed tenant: limits, weight, holds.
    pub(super) fn on_tenant_changed(&mut self, record: &TenantRecord) {
        let now = self.clock.now_ms();
        let slots = self.config.queue.global_limit;
        match self.quotas.get_mut(&record.name) {
            Some(q) => q.update(record, slots, now),
            None => {
                self.quotas.insert(
                    record.name.clone(),
                    TenantQuota::new(record, WindowUse::default(), slots, now),
                );
            }
        }
        self.apply_quota(&record.name);
    }

    /// Pushes a tenant's quota state to the queue (running cap, priority
    /// ceiling, weight, hold), the visible hold reason, and the timer of its
    /// window's end.
    pub(super) fn apply_quota(&mut self, tenant: &str) {
        let Some(q) = self.quotas.get(tenant) else {
            return;
        };
        self.queue.set_tenant(tenant, q.max_running, q.quota.weight);
        self.queue.set_ceiling(tenant, q.max_priority);
        self.queue.set_held(tenant, q.held());
        self.stats.set_hold(tenant, q.hold_reason(tenant));
        if q.has_budget() {
            let end = q.window_end();
            self.timers.insert((
                end,
                Timer::Window {
                    tenant: tenant.to_string(),
                },
            ));
        }
    }
}
