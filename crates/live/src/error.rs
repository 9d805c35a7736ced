//! The crate's one error type. Messages are complete sentences for the user: they
//! name the problem and what to do.

/// Everything that can go wrong creating probes or talking to a collector.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A probe SPEC that does not parse or names an unknown module.
    #[error("{0}")]
    Spec(String),
    /// A location that resolves to no code (no such function, a line without code, a
    /// binary without debug information).
    #[error("{0}")]
    Location(String),
    /// A module whose requirements fail on this machine (privilege, PMU).
    #[error("{0}")]
    Unavailable(String),
    /// The target process: gone, not ours, not readable.
    #[error("{0}")]
    Target(String),
    /// The collector or its socket.
    #[error("{0}")]
    Collector(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { what: what.into(), source }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
