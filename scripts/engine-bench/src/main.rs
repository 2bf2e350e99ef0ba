//! The keys of a one-step run's life, written as ax's sled store writes them
//! (an insert, then a finish, each an atomic write of a group of runs made
//! durable before the next), on sled 0.34, fjall 2 (an LSM tree), redb 2 (a
//! copy-on-write B-tree) and a plain append-only file (the floor: the
//! kernel's cost of a durable write). Prints runs/s, CPU (user + system, all
//! threads) and context switches per run.
//!
//! `engine-bench ENGINE [RUNS] [GROUP]`, ENGINE one of `sled`, `sled-insert`
//! (sled without batches: not atomic, for comparison), `fjall`, `redb`, `log`.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::time::Instant;

type Op = (Vec<u8>, Option<Vec<u8>>);

/// A run's insert: its record, two listing entries, its queue entry, its events.
fn insert_ops(i: u64) -> Vec<Op> {
    let id = format!("{i:020}-abcdef");
    vec![
        (format!("run/{id}").into_bytes(), Some(vec![7; 300])),
        (format!("rt/default/{id}").into_bytes(), Some(Vec::new())),
        (
            format!("rk/default/echo/{id}").into_bytes(),
            Some(Vec::new()),
        ),
        (
            format!("q/default/0000/{id}").into_bytes(),
            Some(b"echo".to_vec()),
        ),
        (
            format!("ev/{id}/{:020}", i * 2).into_bytes(),
            Some(vec![3; 60]),
        ),
    ]
}

/// Its finish: the record again, the queue entry removed, events, logs.
fn finish_ops(i: u64) -> Vec<Op> {
    let id = format!("{i:020}-abcdef");
    vec![
        (format!("run/{id}").into_bytes(), Some(vec![9; 350])),
        (format!("q/default/0000/{id}").into_bytes(), None),
        (
            format!("ev/{id}/{:020}", i * 2 + 1).into_bytes(),
            Some(vec![3; 80]),
        ),
        (
            format!("log/{id}/a/0000000001").into_bytes(),
            Some(vec![1; 40]),
        ),
    ]
}

/// One durable atomic write of `ops`.
trait Engine {
    fn write(&mut self, ops: Vec<Op>);
}

struct Sled {
    db: sled::Db,
    log: std::fs::File,
    batch: bool,
}

impl Engine for Sled {
    fn write(&mut self, ops: Vec<Op>) {
        if self.batch {
            let mut batch = sled::Batch::default();
            for (k, v) in ops {
                match v {
                    Some(v) => batch.insert(k, v),
                    None => batch.remove(k),
                }
            }
            self.db.apply_batch(batch).unwrap();
        } else {
            for (k, v) in ops {
                match v {
                    Some(v) => drop(self.db.insert(k, v).unwrap()),
                    None => drop(self.db.remove(k).unwrap()),
                }
            }
        }
        // As ax's flusher does: sled's flush, then an fsync of its log.
        self.db.flush().unwrap();
        self.log.sync_data().unwrap();
    }
}

struct Fjall {
    keyspace: fjall::Keyspace,
    tree: fjall::PartitionHandle,
}

impl Engine for Fjall {
    fn write(&mut self, ops: Vec<Op>) {
        let mut batch = self.keyspace.batch();
        for (k, v) in ops {
            match v {
                Some(v) => batch.insert(&self.tree, k, v),
                None => batch.remove(&self.tree, k),
            }
        }
        batch.commit().unwrap();
        self.keyspace.persist(fjall::PersistMode::SyncData).unwrap();
    }
}

struct Redb(redb::Database);

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("t");

impl Engine for Redb {
    fn write(&mut self, ops: Vec<Op>) {
        let tx = self.0.begin_write().unwrap();
        {
            let mut table = tx.open_table(TABLE).unwrap();
            for (k, v) in ops {
                match v {
                    Some(v) => drop(table.insert(k.as_slice(), v.as_slice()).unwrap()),
                    None => drop(table.remove(k.as_slice()).unwrap()),
                }
            }
        }
        tx.commit().unwrap();
    }
}

/// Appends each write to one file and fsyncs it, keeping the map in memory.
struct Log {
    file: std::fs::File,
    at: u64,
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Engine for Log {
    fn write(&mut self, ops: Vec<Op>) {
        let mut buf = Vec::new();
        for (k, v) in ops {
            buf.extend_from_slice(&(k.len() as u32).to_le_bytes());
            buf.extend_from_slice(&k);
            match v {
                Some(v) => {
                    buf.extend_from_slice(&v);
                    self.map.insert(k, v);
                }
                None => drop(self.map.remove(&k)),
            }
        }
        self.file.write_at(&buf, self.at).unwrap();
        self.at += buf.len() as u64;
        self.file.sync_data().unwrap();
    }
}

/// CPU seconds (user + system) and context switches of the process so far.
fn usage() -> (f64, i64) {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (
        secs(u.ru_utime) + secs(u.ru_stime),
        u.ru_nvcsw + u.ru_nivcsw,
    )
}

fn open(name: &str, dir: &str) -> Box<dyn Engine> {
    match name {
        "sled" | "sled-insert" => {
            let db = sled::Config::new()
                .path(dir)
                .cache_capacity(256 << 20)
                .open()
                .unwrap();
            let log = std::fs::File::open(format!("{dir}/db")).unwrap();
            Box::new(Sled {
                db,
                log,
                batch: name == "sled",
            })
        }
        "fjall" => {
            let keyspace = fjall::Config::new(dir)
                .manual_journal_persist(true)
                .open()
                .unwrap();
            let tree = keyspace.open_partition("t", Default::default()).unwrap();
            Box::new(Fjall { keyspace, tree })
        }
        "redb" => Box::new(Redb(
            redb::Database::create(format!("{dir}/db.redb")).unwrap(),
        )),
        "log" => Box::new(Log {
            file: std::fs::File::create(format!("{dir}/log")).unwrap(),
            at: 0,
            map: BTreeMap::new(),
        }),
        other => panic!("unknown engine {other}: sled, sled-insert, fjall, redb or log"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().expect("engine-bench ENGINE [RUNS] [GROUP]");
    let runs: u64 = args.next().map_or(14_000, |s| s.parse().unwrap());
    let group: u64 = args.next().map_or(7, |s| s.parse().unwrap());
    let dir = std::env::temp_dir().join(format!("engine-bench-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut engine = open(&name, dir.to_str().unwrap());
    let groups = runs / group;
    let (cpu, switches) = usage();
    let start = Instant::now();
    for g in 0..groups {
        let ids = g * group..(g + 1) * group;
        engine.write(ids.clone().flat_map(insert_ops).collect());
        engine.write(ids.flat_map(finish_ops).collect());
    }
    let wall = start.elapsed().as_secs_f64();
    let (cpu_after, switches_after) = usage();
    let n = (groups * group) as f64;
    println!(
        "{name}: {:.0} runs/s, CPU {:.1} us/run, {:.1} context switches/run",
        n / wall,
        (cpu_after - cpu) / n * 1e6,
        (switches_after - switches) as f64 / n
    );
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
