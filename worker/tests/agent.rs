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
                    lengths: Default::default(),
                },
                values: ValueSizes::Fixed(8),
                content: Default::default(),
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

/// The scripted coordinator on `listener`: each session a worker opens comes out of the
/// receiver.
fn serve(
    listener: tokio::net::TcpListener,
) -> mpsc::UnboundedReceiver<(Streaming<pb::WorkerMessage>, mpsc::Sender<Out>)> {
    let (stx, sessions) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(CoordinatorServer::new(Scripted { sessions: stx }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    sessions
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
        let mut sessions = serve(listener);
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
        let mut sessions = serve(listener);
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

/// A replayed trace (protocol 13): a worker of two shards takes a trace class, its
/// scripted coordinator streams each shard its part in chunks, and the worker sends every
/// record at its time against a real server: the server's calls per command equal the
/// records', a key's value has its last write's size, TTLs are set, the acknowledgements
/// reach every record, and the run's totals count each one once. A chunk out of order then
/// stops a second run, named.
#[test]
fn a_worker_replays_the_trace_chunks_it_is_streamed() {
    use crest_model::trace::{Batch, TraceOp};
    use crest_testkit::{Kind, Server};
    use crest_trace::Op;
    let server = Server::start(Kind::Valkey);
    let ops = vec![
        TraceOp::Op(Op::Get),
        TraceOp::Op(Op::Set),
        TraceOp::Op(Op::Delete),
    ];
    let mut plan = good_plan();
    plan.target = server.addr();
    plan.total_shards = 2;
    // Wide margins: a start the shards reach late (a busy machine) sends the overdue
    // records at once, from the backlog, well inside the timeout.
    plan.drain = Duration::from_secs(5);
    plan.timeout = Duration::from_secs(10);
    plan.backlog_limit = 100_000;
    plan.classes[0].load = Load::Trace { ops: ops.clone() };
    plan.classes[0].shape.mix = vec![
        ("GET".into(), 1),
        ("SET __key__ __value__".into(), 1),
        ("DEL".into(), 1),
    ];
    plan.classes[0].shape.values = ValueSizes::Fixed(4096);
    plan.classes[0].shape.pipeline = 8;
    plan.shards = (0..2)
        .map(|i| ShardPart {
            shard: i,
            global_index: i,
            share: 0.5,
            seed: u64::from(i) + 1,
            // Shard 0 on three connections (a lane each, a key always on its lane's),
            // shard 1 on one: either way a key's requests keep their order.
            classes: vec![ShardClassPart {
                connections: if i == 0 { 3 } else { 1 },
                budget: None,
                checkpoints: Vec::new(),
            }],
        })
        .collect();
    // Shard s: keys k<s>:<j>; each key is set (100 + j bytes, TTL 600 for even j), read,
    // set again (j bytes, or 5000 bytes: longer than the value buffer), and the last
    // fifth deleted; 2 ms apart from 50 ms on, in chunks of 40 records.
    let ms = 1_000_000u64;
    let mut chunks: Vec<Vec<pb::TraceChunk>> = vec![Vec::new(), Vec::new()];
    let mut want: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut last_size = Vec::new();
    for s in 0..2u32 {
        let mut recs = Vec::new();
        for j in 0..50u64 {
            let key = format!("k{s}:{j}");
            let second = if j % 7 == 0 { 5_000 } else { j };
            recs.push((1u32, key.clone(), 100 + j, if j % 2 == 0 { 600 } else { 0 }));
            recs.push((0, key.clone(), 0, 0));
            recs.push((1, key.clone(), second, 0));
            if j >= 40 {
                recs.push((2, key.clone(), 0, 0));
            } else {
                last_size.push((key, second));
            }
        }
        let mut b = Batch::new(1, false);
        for (i, (op, key, size, ttl)) in recs.iter().enumerate() {
            *want.entry(["get", "set", "del"][*op as usize]).or_default() += 1;
            b.push(
                50 * ms + i as u64 * 2 * ms,
                *op,
                key.as_bytes(),
                *size,
                *ttl,
                b"",
            );
            if b.len() == 40 || i + 1 == recs.len() {
                let seq = b.seq;
                b.last = i + 1 == recs.len();
                let full = std::mem::replace(&mut b, Batch::new(seq + 1, false));
                chunks[s as usize].push(convert::batch_to_wire("r1", 0, s, full));
            }
        }
    }
    let records: u64 = want.values().sum();
    runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut sessions = serve(listener);
        let mut cfg = agent_config(addr, false);
        cfg.cores = vec![
            core_affinity::CoreId { id: 0 },
            core_affinity::CoreId { id: 1 },
        ];
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let worker = tokio::spawn(agent::run(cfg, async {
            let _ = stop_rx.await;
        }));
        let (mut inbound, out) = sessions.recv().await.unwrap();
        let In::Register(_) = next(&mut inbound).await else {
            panic!("the first message is Register")
        };
        out.send(Out::Welcome(pb::Welcome::default()))
            .await
            .unwrap();
        // The coordinator's heartbeat, as the worker's dead man's switch needs.
        let beat = out.clone();
        tokio::spawn(async move {
            while beat.send(Out::Heartbeat(pb::Heartbeat {})).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        out.send(Out::Start(pb::StartRun {
            plan: Some(pb::RunPlan::from(&plan)),
            start_at_unix_ns: crest_model::clock::unix_ns() + 1_000 * ms as i64,
        }))
        .await
        .unwrap();
        // The first chunk of each shard ahead of time, the rest as acknowledgements come
        // (at most two chunks unacknowledged per shard, as a window would keep it).
        let mut sent = [0usize; 2];
        for s in 0..2 {
            out.send(Out::TraceChunk(chunks[s][0].clone()))
                .await
                .unwrap();
            sent[s] = 1;
        }
        let mut acked = [0u64; 2];
        let finished = loop {
            match next(&mut inbound).await {
                In::TraceAck(a) => {
                    assert_eq!((a.run_id.as_str(), a.class_index), ("r1", 0));
                    let s = a.shard as usize;
                    assert!(a.consumed > acked[s], "acknowledgements only grow");
                    acked[s] = a.consumed;
                    let given: u64 = chunks[s][..sent[s]]
                        .iter()
                        .map(|c| c.at_ns.len() as u64)
                        .sum();
                    assert!(a.consumed <= given, "never more taken than was sent");
                    if sent[s] < chunks[s].len() && given - a.consumed < 40 {
                        out.send(Out::TraceChunk(chunks[s][sent[s]].clone()))
                            .await
                            .unwrap();
                        sent[s] += 1;
                    }
                }
                In::Finished(f) => break f,
                In::Interval(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(sent, [chunks[0].len(), chunks[1].len()]);
        assert_eq!(
            acked.iter().sum::<u64>(),
            records,
            "every record acknowledged"
        );
        let counts: u64 = finished.totals.iter().map(|c| c.scheduled).sum();
        let completed: u64 = finished.totals.iter().map(|c| c.completed).sum();
        assert_eq!(
            (completed, finished.in_flight),
            (records, 0),
            "{finished:?}"
        );
        assert_eq!(counts, records, "{finished:?}");
        let calls = server.commandstats();
        for (cmd, n) in &want {
            assert_eq!(
                calls.get(*cmd).copied().unwrap_or(0),
                *n,
                "{cmd}: {calls:?}"
            );
        }
        for (key, size) in &last_size {
            let got = server.command(&[b"STRLEN", key.as_bytes()]);
            assert_eq!(got, crest_resp::Frame::Integer(*size as i64), "{key}");
        }
        let ttl = server.command(&[b"TTL", b"k0:38"]);
        assert_eq!(
            ttl,
            crest_resp::Frame::Integer(-1),
            "the second SET had no TTL"
        );
        assert_eq!(
            server.command(&[b"EXISTS", b"k1:45"]),
            crest_resp::Frame::Integer(0)
        );

        // A trace class with no connection on a shard could not send its part: the plan
        // is refused, named.
        let mut none = plan.clone();
        none.run_id = "r0".into();
        let mut wire = pb::RunPlan::from(&none);
        wire.shards[0].classes[0].connections = 0;
        out.send(Out::Start(pb::StartRun {
            plan: Some(wire),
            start_at_unix_ns: crest_model::clock::unix_ns() + 1_000 * ms as i64,
        }))
        .await
        .unwrap();
        let f = loop {
            match next(&mut inbound).await {
                In::Failed(f) => break f,
                In::Interval(_) | In::TraceAck(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        assert!(
            f.reason.contains("shards[0].classes[0].connections")
                && f.reason.contains("at least 1 for a replayed trace"),
            "{}",
            f.reason
        );

        // A second run whose first chunk is number 2: refused, named.
        let mut plan2 = plan.clone();
        plan2.run_id = "r2".into();
        out.send(Out::Start(pb::StartRun {
            plan: Some(pb::RunPlan::from(&plan2)),
            start_at_unix_ns: crest_model::clock::unix_ns() + 300 * ms as i64,
        }))
        .await
        .unwrap();
        let mut wrong = chunks[0][1].clone();
        wrong.run_id = "r2".into();
        out.send(Out::TraceChunk(wrong)).await.unwrap();
        let f = loop {
            match next(&mut inbound).await {
                In::Failed(f) => break f,
                In::Interval(_) | In::TraceAck(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(convert::failure_kind(&f), FailureKind::BadPlan, "{f:?}");
        assert!(
            f.reason
                .contains("trace chunk 2 of shard 0 came out of order"),
            "{}",
            f.reason
        );
        let _ = stop_tx.send(());
        drop(out);
        let _ = tokio::time::timeout(Duration::from_secs(5), worker).await;
    });
}
