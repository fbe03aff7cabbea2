//! The request trace log: one JSON object a line per lifecycle event (`--trace-log PATH`), with
//! FastDeploy's event and stage names.

use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

/// A lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum TraceKind {
    PreprocessingStart,
    PreprocessingEnd,
    RequestScheduleStart,
    RequestQueueStart,
    RequestQueueEnd,
    ResourceAllocateStart,
    PreparePrefixCacheStart,
    PreparePrefixCacheEnd,
    ResourceAllocateEnd,
    RequestScheduleEnd,
    InferenceStart,
    FirstTokenGenerated,
    DecodeStart,
    InferenceEnd,
    Preempted,
    RescheduledInferenceStart,
    MigrateOutStart,
    MigrateOutEnd,
    MigrateInEnd,
    PostprocessingStart,
    PostprocessingEnd,
}

impl TraceKind {
    /// The events of a first admission, in order.
    pub const ADMISSION: [TraceKind; 7] = [
        TraceKind::RequestQueueEnd,
        TraceKind::ResourceAllocateStart,
        TraceKind::PreparePrefixCacheStart,
        TraceKind::PreparePrefixCacheEnd,
        TraceKind::ResourceAllocateEnd,
        TraceKind::RequestScheduleEnd,
        TraceKind::InferenceStart,
    ];

    /// The event's name.
    pub fn name(self) -> &'static str {
        use TraceKind::*;
        match self {
            PreprocessingStart => "PREPROCESSING_START",
            PreprocessingEnd => "PREPROCESSING_END",
            RequestScheduleStart => "REQUEST_SCHEDULE_START",
            RequestQueueStart => "REQUEST_QUEUE_START",
            RequestQueueEnd => "REQUEST_QUEUE_END",
            ResourceAllocateStart => "RESOURCE_ALLOCATE_START",
            PreparePrefixCacheStart => "PREPARE_PREFIX_CACHE_START",
            PreparePrefixCacheEnd => "PREPARE_PREFIX_CACHE_END",
            ResourceAllocateEnd => "RESOURCE_ALLOCATE_END",
            RequestScheduleEnd => "REQUEST_SCHEDULE_END",
            InferenceStart => "INFERENCE_START",
            FirstTokenGenerated => "FIRST_TOKEN_GENERATED",
            DecodeStart => "DECODE_START",
            InferenceEnd => "INFERENCE_END",
            Preempted => "PREEMPTED",
            RescheduledInferenceStart => "RESCHEDULED_INFERENCE_START",
            MigrateOutStart => "MIGRATE_OUT_START",
            MigrateOutEnd => "MIGRATE_OUT_END",
            MigrateInEnd => "MIGRATE_IN_END",
            PostprocessingStart => "POSTPROCESSING_START",
            PostprocessingEnd => "POSTPROCESSING_END",
        }
    }

    /// The stage the event belongs to.
    pub fn stage(self) -> &'static str {
        use TraceKind::*;
        match self {
            PreprocessingStart | PreprocessingEnd => "PREPROCESSING",
            RequestScheduleStart
            | RequestQueueStart
            | RequestQueueEnd
            | ResourceAllocateStart
            | PreparePrefixCacheStart
            | PreparePrefixCacheEnd
            | ResourceAllocateEnd
            | RequestScheduleEnd => "SCHEDULE",
            InferenceStart | FirstTokenGenerated => "PREFILL",
            DecodeStart | InferenceEnd | Preempted | RescheduledInferenceStart => "DECODE",
            MigrateOutStart | MigrateOutEnd | MigrateInEnd => "MIGRATION",
            PostprocessingStart | PostprocessingEnd => "POSTPROCESSING",
        }
    }
}

/// An event of one request at one time (Unix seconds in real time).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// When.
    pub time: f64,
    /// Which request.
    pub request_id: String,
    /// What.
    pub kind: TraceKind,
}

#[derive(Serialize)]
struct TraceLine<'a> {
    timestamp: u64,
    request_id: &'a str,
    event: &'static str,
    stage: &'static str,
    instance: &'a str,
}

/// A handle to the trace log's writer thread; cheap to clone, shared by all instances.
#[derive(Debug, Clone)]
pub struct TraceLog {
    sender: mpsc::Sender<(String, Vec<TraceEvent>)>,
}

impl TraceLog {
    /// Opens (appends to) `path` and starts the writer thread.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (sender, receiver) = mpsc::channel::<(String, Vec<TraceEvent>)>();
        std::thread::Builder::new()
            .name("trace-log".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(file);
                while let Ok(batch) = receiver.recv() {
                    let written = write_batch(&mut out, &batch)
                        .and_then(|()| {
                            while let Ok(more) = receiver.try_recv() {
                                write_batch(&mut out, &more)?;
                            }
                            Ok(())
                        })
                        .and_then(|()| out.flush());
                    if let Err(e) = written {
                        tracing::error!(
                            "trace log write failed, no further events are written: {e}"
                        );
                        break;
                    }
                }
            })?;
        Ok(TraceLog { sender })
    }

    /// Queues events of `instance` for writing.
    pub fn write(&self, instance: &str, events: Vec<TraceEvent>) {
        if !events.is_empty() {
            // The writer only stops after logging that its file failed.
            let _ = self.sender.send((instance.to_string(), events));
        }
    }
}

fn write_batch(
    out: &mut impl Write,
    (instance, events): &(String, Vec<TraceEvent>),
) -> std::io::Result<()> {
    for e in events {
        let line = TraceLine {
            timestamp: (e.time * 1000.0) as u64,
            request_id: &e.request_id,
            event: e.kind.name(),
            stage: e.kind.stage(),
            instance,
        };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)?;
    }
    Ok(())
}
