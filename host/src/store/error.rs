//! The store's errors: what a caller can tell apart (unusable, unavailable
//! now, corrupt) whatever the backend.

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store on disk cannot be used (corrupt, wrong format, locked).
    #[error("the store at {path} cannot be opened: {reason}. {hint}")]
    Unusable {
        /// The data directory.
        path: String,
        /// What went wrong.
        reason: String,
        /// What the operator can do.
        hint: String,
    },
    /// An I/O error on the data directory.
    #[error("store I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A stored value could not be decoded.
    #[error("corrupt record {key}: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Any other backend failure.
    #[error("store backend error: {0}")]
    Backend(String),
    /// A run was written over a revision it was not made from: another
    /// writer stored the run since this writer read it
    /// ([`crate::model::RunRecord::revision`]). Nothing of the write was
    /// stored; the writer must read the run again before it changes it.
    #[error(
        "run {id} was changed by another writer: stored revision {stored}, this write makes {given}"
    )]
    Conflict {
        /// The run.
        id: String,
        /// Its revision in the store.
        stored: u64,
        /// The revision the refused write would have stored.
        given: u64,
    },
    /// The store cannot write now (a full disk, an I/O error, a database
    /// being reopened after one): nothing of the write was stored, and the
    /// same write may succeed later ([`Error::is_unavailable`]).
    #[error("the store cannot write now: {0}")]
    Unavailable(String),
}

impl Error {
    /// Whether this is a refusal to write *now* (full disk, I/O error) that
    /// goes away by itself once writes succeed again: [`Error::Io`] and
    /// [`Error::Unavailable`]. The API answers it 503 `store_unavailable`
    /// with `Retry-After`; the scheduler holds its writes and stops firing
    /// until the store writes again (docs/RELIABILITY.md, "Store faults").
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Unavailable(_))
    }

    /// The same error again, for a second waiter (errors are not `Clone`:
    /// an I/O error keeps its kind and text, the rest their text).
    pub fn duplicate(&self) -> Self {
        match self {
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Unavailable(m) => Error::Unavailable(m.clone()),
            Error::Unusable { path, reason, hint } => Error::Unusable {
                path: path.clone(),
                reason: reason.clone(),
                hint: hint.clone(),
            },
            Error::Corrupt { key, reason } => Error::Corrupt {
                key: key.clone(),
                reason: reason.clone(),
            },
            Error::Backend(m) => Error::Backend(m.clone()),
            Error::Conflict { id, stored, given } => Error::Conflict {
                id: id.clone(),
                stored: *stored,
                given: *given,
            },
        }
    }
}

/// Result type of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;
