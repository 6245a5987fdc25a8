//! The gRPC side of the coordinator: accepts worker sessions, checks them, and turns the
//! stream into plain [`HubEvent`]s for the run orchestrator. No run logic lives here.

use crest_model::convert::Registration;
use crest_proto::PROTOCOL_VERSION;
use crest_proto::pb::{
    self, coordinator_message::Msg as Out, coordinator_server::Coordinator,
    worker_message::Msg as In,
};
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// A worker must register this soon after opening its session.
const REGISTER_WITHIN: Duration = Duration::from_secs(5);
/// Messages queued to one worker before sends wait.
const OUTBOX: usize = 256;

/// A registered worker as the coordinator sees it.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// Worker uuid.
    pub id: String,
    /// Name shown in reports.
    pub name: String,
    /// Host the worker says it runs on.
    pub host: String,
    /// Pinned shards.
    pub shards: u32,
    /// Cores of those shards.
    pub cpus: Vec<u32>,
    /// Crest version of the worker.
    pub version: String,
    /// Worker's address as seen from here.
    pub peer: Option<SocketAddr>,
    /// Our address as the worker dialled it (reachable from that worker).
    pub local: Option<SocketAddr>,
}

/// A registered worker and the way to talk to it.
#[derive(Debug, Clone)]
pub struct WorkerLink {
    /// Who.
    pub info: WorkerInfo,
    /// Messages to the worker.
    pub tx: mpsc::Sender<pb::CoordinatorMessage>,
}

impl WorkerLink {
    /// Sends a message; false when the worker's stream is gone.
    pub async fn send(&self, m: Out) -> bool {
        self.tx
            .send(pb::CoordinatorMessage { msg: Some(m) })
            .await
            .is_ok()
    }
}

/// What the hub reports to the orchestrator.
#[derive(Debug)]
pub enum HubEvent {
    /// A worker registered.
    Joined(WorkerLink),
    /// A worker was refused (version, token, ...).
    Refused {
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A message from a registered worker.
    Message(String, In),
    /// A registered worker's stream ended.
    Left(String, String),
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct Hub {
    events: mpsc::UnboundedSender<HubEvent>,
    token: String,
    coordinator_id: String,
}

impl Hub {
    /// A hub that reports to `events` and requires `token` (empty = none).
    pub fn new(events: mpsc::UnboundedSender<HubEvent>, token: String) -> Self {
        Self {
            events,
            token,
            coordinator_id: uuid::Uuid::new_v4().to_string(),
        }
    }

    /// Checks a registration: every field in range (`crest_model::convert`), then the
    /// protocol version and the token. `Err` carries the refusal reason.
    ///
    /// # Errors
    /// The refusal reason, naming the worker and what would be right.
    pub fn check(&self, r: &pb::Register) -> Result<Registration, String> {
        let name: String = r.name.chars().take(64).collect();
        if r.protocol_version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version mismatch: worker {name} speaks version {} (crest {}), this coordinator speaks version {} (crest {}); run the same Crest release on both",
                r.protocol_version,
                r.crest_version.chars().take(32).collect::<String>(),
                PROTOCOL_VERSION,
                env!("CARGO_PKG_VERSION")
            ));
        }
        if !self.token.is_empty() && r.token != self.token {
            return Err(format!(
                "worker {name} gave {} token; start it with the coordinator's --token (or CREST_TOKEN)",
                if r.token.is_empty() { "no" } else { "a wrong" }
            ));
        }
        Registration::try_from(r).map_err(|e| format!("worker {name}: registration refused: {e}"))
    }
}

type OutStream = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Coordinator for Hub {
    type SessionStream = OutStream;

    async fn session(
        &self,
        req: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<OutStream>, Status> {
        let peer = req.remote_addr();
        let local = req.local_addr();
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(REGISTER_WITHIN, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Register within 5 s"))??;
        let Some(pb::WorkerMessage {
            msg: Some(In::Register(reg)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "the first message of a session must be Register",
            ));
        };
        let (tx, rx) = mpsc::channel::<pb::CoordinatorMessage>(OUTBOX);
        let reg = match self.check(&reg) {
            Ok(checked) => checked,
            Err(reason) => {
                let _ = self.events.send(HubEvent::Refused {
                    name: reg.name.clone(),
                    reason: reason.clone(),
                });
                let _ = tx
                    .send(pb::CoordinatorMessage {
                        msg: Some(Out::Refused(pb::Refused { reason })),
                    })
                    .await;
                drop(tx);
                return Ok(Response::new(Box::pin(ReceiverStream::new(rx).map_ok())));
            }
        };
        let _ = tx
            .send(pb::CoordinatorMessage {
                msg: Some(Out::Welcome(pb::Welcome {
                    coordinator_id: self.coordinator_id.clone(),
                })),
            })
            .await;
        let info = WorkerInfo {
            id: reg.worker_id.clone(),
            name: reg.name.clone(),
            host: reg.host.clone(),
            shards: reg.shards,
            cpus: reg.cpus.clone(),
            version: reg.crest_version.clone(),
            peer,
            local,
        };
        let id = info.id.clone();
        let _ = self.events.send(HubEvent::Joined(WorkerLink {
            info,
            tx: tx.clone(),
        }));
        // Heartbeats keep the worker's dead man's switch from firing while idle.
        let hb_tx = tx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(crest_proto::HEARTBEAT);
            loop {
                tick.tick().await;
                let m = pb::CoordinatorMessage {
                    msg: Some(Out::Heartbeat(pb::Heartbeat {})),
                };
                if hb_tx.send(m).await.is_err() {
                    break;
                }
            }
        });
        let events = self.events.clone();
        tokio::spawn(async move {
            let reason = loop {
                match inbound.message().await {
                    Ok(Some(pb::WorkerMessage { msg: Some(m) })) => {
                        if events.send(HubEvent::Message(id.clone(), m)).is_err() {
                            break "coordinator stopped".to_string();
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break "session closed".to_string(),
                    Err(s) => break format!("session error: {}", s.message()),
                }
            };
            let _ = events.send(HubEvent::Left(id, reason));
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map_ok())))
    }
}

type Wrap = fn(pb::CoordinatorMessage) -> Result<pb::CoordinatorMessage, Status>;

trait MapOk: Stream<Item = pb::CoordinatorMessage> + Sized {
    fn map_ok(self) -> tokio_stream::adapters::Map<Self, Wrap> {
        tokio_stream::StreamExt::map(self, Ok as Wrap)
    }
}
impl<S: Stream<Item = pb::CoordinatorMessage>> MapOk for S {}

/// Serves the hub on `listener` until `shutdown` resolves.
///
/// # Errors
/// Transport errors from tonic.
pub async fn serve(
    hub: Hub,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(crest_proto::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(crest_proto::KEEPALIVE_TIMEOUT))
        .add_service(pb::coordinator_server::CoordinatorServer::new(hub))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(version: u32, token: &str) -> pb::Register {
        pb::Register {
            protocol_version: version,
            worker_id: "id".into(),
            name: "w1".into(),
            host: "h".into(),
            shards: 2,
            token: token.into(),
            crest_version: "9.9.9".into(),
            cpus: vec![0, 1],
        }
    }

    #[test]
    fn a_worker_of_another_protocol_version_is_refused_naming_both() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let hub = Hub::new(tx, String::new());
        assert!(hub.check(&reg(PROTOCOL_VERSION, "")).is_ok());
        let e = hub.check(&reg(PROTOCOL_VERSION + 1, "")).unwrap_err();
        assert!(
            e.contains(&format!("version {}", PROTOCOL_VERSION + 1)),
            "{e}"
        );
        assert!(
            e.contains(&format!("speaks version {PROTOCOL_VERSION}")),
            "{e}"
        );
    }

    #[test]
    fn the_token_is_required_when_set() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let hub = Hub::new(tx, "s3cret".into());
        assert!(hub.check(&reg(PROTOCOL_VERSION, "s3cret")).is_ok());
        assert!(
            hub.check(&reg(PROTOCOL_VERSION, ""))
                .unwrap_err()
                .contains("no token")
        );
        assert!(
            hub.check(&reg(PROTOCOL_VERSION, "x"))
                .unwrap_err()
                .contains("wrong token")
        );
    }
}
