//! The agent against a coordinator that sends nonsense: a scripted gRPC coordinator on
//! loopback port 0 sends plans with NaN, infinite or huge fields; the worker refuses each
//! with `RunFailed { kind: BAD_PLAN }` naming the field, and stays up (it answers a ping).

use crest_engine::agent::{self, AgentConfig};
use crest_model::convert::{self, FailureKind};
use crest_model::plan::{ClassPlan, KeySpec, Load, RunPlan, Shape, ShardClassPart};
use crest_model::plan::{Pacer, ShardPart};
use crest_model::schedule::{Arrival, Profile};
use crest_model::shapes::{KeyDist, ValueSizes};
use crest_proto::pb::{
    self, coordinator_message::Msg as Out, coordinator_server::Coordinator,
    coordinator_server::CoordinatorServer, worker_message::Msg as In,
};
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

type OutStream = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

/// A coordinator that hands every session to the test: messages in, messages out.
struct Scripted {
    sessions: mpsc::UnboundedSender<(Streaming<pb::WorkerMessage>, mpsc::Sender<Out>)>,
}

#[tonic::async_trait]
impl Coordinator for Scripted {
    type SessionStream = OutStream;

    async fn session(
        &self,
        req: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<OutStream>, Status> {
        let (tx, rx) = mpsc::channel::<Out>(16);
        self.sessions.send((req.into_inner(), tx)).unwrap();
        // tonic's stream item is Result<_, Status>; its size is tonic's, not ours.
        #[allow(clippy::result_large_err)]
        let wrap = |m| Ok(pb::CoordinatorMessage { msg: Some(m) });
        let out = ReceiverStream::new(rx).map(wrap);
        Ok(Response::new(Box::pin(out)))
    }
}

fn good_plan() -> RunPlan {
    RunPlan {
        run_id: "r1".into(),
        target: "127.0.0.1:1".into(),
        classes: vec![ClassPlan {
            name: "c".into(),
            load: Load::Open(Profile::constant(10.0, 1_000_000_000).unwrap()),
            shape: Shape {
                mix: vec![("GET".into(), 1)],
                keys: KeySpec {
                    count: 10,
                    prefix: "k:".into(),
                    dist: KeyDist::Uniform,
                },
                values: ValueSizes::Fixed(8),
                pipeline: 1,
                ttl: None,
                batch: 1,
                members: 10,
                members_sequential: false,
                range: 10,
            },
        }],
        arrival: Arrival::Uniform,
        pacer: Pacer::Sleep,
        timeout: Duration::from_secs(1),
        drain: Duration::ZERO,
        warmup: Duration::ZERO,
        interval: Duration::from_secs(1),
        total_shards: 1,
        shards: vec![ShardPart {
            shard: 0,
            global_index: 0,
            share: 1.0,
            seed: 1,
            classes: vec![ShardClassPart {
                connections: 1,
                budget: None,
                checkpoints: Vec::new(),
            }],
        }],
        backlog_limit: 10,
        session: Default::default(),
        tls: None,
        cluster: Default::default(),
        protocol: Default::default(),
        ring: Vec::new(),
        churn: Default::default(),
        read_from: Default::default(),
        replicas: Vec::new(),
        check_staleness: false,
    }
}

/// A runtime of two threads: the worker's and the scripted coordinator's.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A one-shard worker of `addr`: for one session (`once`), or for one run (`one_run`).
fn agent_config(addr: std::net::SocketAddr, one_run: bool) -> AgentConfig {
    AgentConfig {
        coordinator: format!("http://{addr}"),
        name: "w".into(),
        host: "h".into(),
        token: String::new(),
        cores: vec![core_affinity::CoreId { id: 0 }],
        once: !one_run,
        one_run,
        in_process: false,
        tls: None,
    }
}

/// Waits for the next message of `kind` on the session, skipping heartbeats.
async fn next(inbound: &mut Streaming<pb::WorkerMessage>) -> In {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), inbound.message())
            .await
            .expect("the worker answers within 5 s")
            .expect("the stream stays up")
            .expect("the worker is still connected");
        match m.msg {
            Some(In::Heartbeat(_)) | None => continue,
            Some(other) => return other,
        }
    }
}

#[test]
fn a_worker_refuses_nonsense_plans_by_field_and_stays_up() {
    runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stx, mut sessions) = mpsc::unbounded_channel();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(CoordinatorServer::new(Scripted { sessions: stx }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let worker = tokio::spawn(agent::run(agent_config(addr, false), async {
            let _ = stop_rx.await;
        }));
        let (mut inbound, out) = sessions.recv().await.unwrap();
        let In::Register(reg) = next(&mut inbound).await else {
            panic!("the first message is Register")
        };
        assert_eq!(reg.shards, 1);
        out.send(Out::Welcome(pb::Welcome::default()))
            .await
            .unwrap();

        let good = pb::RunPlan::from(&good_plan());
        type Edit = fn(&mut pb::RunPlan);
        let cases: &[(&str, Edit)] = &[
            ("share", |p| p.shards[0].share = f64::NAN),
            ("share", |p| p.shards[0].share = f64::INFINITY),
            ("share", |p| p.shards[0].share = -1.0),
            ("from_rps", |p| {
                p.classes[0].profile.as_mut().unwrap().segments[0].from_rps = f64::NAN
            }),
            ("total_shards", |p| p.total_shards = u32::MAX),
            ("connections", |p| {
                p.shards[0].classes[0].connections = u32::MAX
            }),
            ("pipeline", |p| p.classes[0].pipeline = u32::MAX),
            ("interval_ns", |p| p.interval_ns = u64::MAX),
            ("segments", |p| {
                p.classes[0].profile.as_mut().unwrap().segments.clear()
            }),
        ];
        for (seq, (field, edit)) in cases.iter().enumerate() {
            let mut plan = good.clone();
            edit(&mut plan);
            out.send(Out::Start(pb::StartRun {
                plan: Some(plan),
                start_at_unix_ns: crest_model::clock::unix_ns(),
            }))
            .await
            .unwrap();
            let In::Failed(f) = next(&mut inbound).await else {
                panic!("{field}: the worker did not refuse the plan")
            };
            assert_eq!(
                convert::failure_kind(&f),
                FailureKind::BadPlan,
                "{field}: {f:?}"
            );
            assert!(f.reason.contains(field), "{field}: {}", f.reason);
            // Still up: it answers a ping after the refusal.
            out.send(Out::Ping(pb::Ping {
                seq: seq as u64,
                t1_unix_ns: 1,
            }))
            .await
            .unwrap();
            let In::Pong(p) = next(&mut inbound).await else {
                panic!("{field}: no pong after the refusal")
            };
            assert_eq!(p.seq, seq as u64);
        }
        let _ = stop_tx.send(());
        drop(out);
        let _ = tokio::time::timeout(Duration::from_secs(5), worker).await;
    });
}

/// `one_run` (`crest-worker --one-run`, a per-run Kubernetes Job's workers): a worker that
/// starts before its coordinator keeps dialling until it answers, and once that session
/// ends it exits instead of dialling again.
#[test]
fn a_one_run_worker_waits_for_its_coordinator_and_exits_after_the_session() {
    runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Nobody listens yet: the worker's first dials fail.
        drop(listener);
        let worker = tokio::spawn(agent::run(agent_config(addr, true), std::future::pending()));
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            !worker.is_finished(),
            "a failed dial does not end a one-run worker"
        );
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let (stx, mut sessions) = mpsc::unbounded_channel();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(CoordinatorServer::new(Scripted { sessions: stx }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        let (mut inbound, out) = tokio::time::timeout(Duration::from_secs(30), sessions.recv())
            .await
            .expect("the worker dials again")
            .unwrap();
        let In::Register(_) = next(&mut inbound).await else {
            panic!("the first message is Register")
        };
        out.send(Out::Welcome(pb::Welcome::default()))
            .await
            .unwrap();
        // The coordinator ends the session (its run is over).
        drop(out);
        let ended = tokio::time::timeout(Duration::from_secs(10), worker)
            .await
            .expect("the worker exits after its session")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        assert!(
            tokio::time::timeout(Duration::from_millis(500), sessions.recv())
                .await
                .is_err(),
            "a one-run worker does not dial again"
        );
    });
}
