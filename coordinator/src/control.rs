//! The vocabulary of runtime control, shared by its front ends (the admin HTTP API, the
//! gRPC `Control` service, `crest search`) and the run that carries it out
//! ([`crate::orchestrate::steer`]): what can be asked, who asked, and why it can be
//! refused. A leaf: it imports nothing of the coordinator's.

use crest_report::ChangeRow;
use tokio::sync::oneshot;

/// What a user asks of a running phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A new rate, requests per second: the open-loop classes' total (split in
    /// proportion to their rates at the instant), or one class's.
    Rate {
        /// The rate.
        rps: f64,
        /// One class by name (None: all open-loop classes together).
        class: Option<String>,
    },
    /// Every open-loop class at 0 until [`Action::Resume`].
    Pause,
    /// What each class did before the pause.
    Resume,
    /// End the run now; the report covers what ran.
    Stop,
}

impl Action {
    /// The action's name in the report and the API.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Rate { .. } => "rate",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Stop => "stop",
        }
    }
}

/// Why a request cannot be carried out, with the HTTP status that says so.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The request itself is wrong (400).
    #[error("{0}")]
    Bad(String),
    /// Not now: no run, a warm-up, a pause, a closed loop (409).
    #[error("{0}")]
    Conflict(String),
}

/// One request and where its answer goes.
#[derive(Debug)]
pub struct Request {
    /// What is asked.
    pub action: Action,
    /// Who asked: `admin`, `grpc`, `search`.
    pub by: &'static str,
    /// The change as carried out, or why not.
    pub reply: oneshot::Sender<Result<ChangeRow, Refusal>>,
}
