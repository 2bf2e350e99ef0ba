//! The task graph of the facade ([`Ax`]): a task's DAG, or a run's own
//! definition snapshot with its step states, rendered by [`crate::graph`].

use crate::service::{Ax, Error, Result, record_of};
use crate::task::TaskSpec;

impl Ax {
    /// A task's DAG rendered in `format` (see [`crate::graph`]). With `run`,
    /// the graph is that run's own definition snapshot (what ran, even if the
    /// task changed or was deleted since) with its step states; the run must
    /// be this tenant's and this task's, else "not found".
    pub fn task_graph(
        &self,
        tenant: &str,
        name: &str,
        run: Option<&str>,
        format: crate::graph::Format,
    ) -> Result<String> {
        let (spec, states) = match run {
            Some(id) => {
                let run = self.get_run(tenant, id)?;
                if run.task != name {
                    return Err(Error::NotFound(format!("run `{id}` of task `{name}`")));
                }
                let mut states = std::collections::BTreeMap::new();
                for step in &run.steps {
                    // The API's names for step states: serde's snake_case.
                    let status =
                        serde_json::to_value(step.status).map_err(|source| Error::Record {
                            what: format!("the state of step `{}`", step.name),
                            source,
                        })?;
                    let status = status
                        .as_str()
                        .map_or_else(|| status.to_string(), str::to_owned);
                    states.insert(step.name.clone(), status);
                }
                (run.spec, Some(states))
            }
            None => (self.get_task(tenant, name)?.0.spec, None),
        };
        let spec = TaskSpec::stored(&spec).map_err(|e| record_of(name, e))?;
        Ok(crate::graph::render(&spec, states.as_ref(), format))
    }
}
