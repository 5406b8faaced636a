//! The op-log index of one policy folder, built once.
//!
//! AtomRec's full ml-100k log is 1.95M ops (63 MB of zstd, 760 MB of JSON),
//! too much to parse per request or to send to a browser. [`OpIndex::build`]
//! stream-decompresses the log once, spilling the plain lines to a temporary
//! file, and keeps only offsets: the byte offset of every line, its seq, the
//! lines of each namespace (a user's ops are the ops on records created in
//! `user:<U>`), and for every record the first and last op that targeted it.
//! A page of a user's ops is then a few seeks into the spill file; a user's
//! memory at any point is a replay of that user's ops only.
//!
//! Each line is read through a borrowing "peek" type that names only the op
//! kind, the target id and a created record's namespace and kind; the rest
//! of the line (texts, fields, embeddings) is skipped, not allocated.

use crate::error::UiError;
use evomem_core::{LoggedOp, RecordKind};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// The first and last op (line numbers, 0-based) that targeted a record,
/// and the namespace the record was created in.
#[derive(Debug, Clone, Copy)]
pub struct RecordOps {
    /// First op line.
    pub first: u32,
    /// Last op line.
    pub last: u32,
    /// Index into [`OpIndex::namespaces`].
    pub namespace: u32,
}

/// The index (module docs).
pub struct OpIndex {
    /// The spilled plain log: an unnamed temporary file (unlinked from
    /// the start, so it goes with the process however that ends), read
    /// through this one handle (a seek and a short read each).
    reader: Mutex<Option<std::fs::File>>,
    /// Byte offset of every line, plus the end of the file.
    offsets: Vec<u64>,
    /// The seq of every line.
    seqs: Vec<u64>,
    /// Whether `seqs` is sorted (then a seq is found by binary search).
    seqs_sorted: bool,
    /// Namespace names, in order of first appearance.
    namespaces: Vec<String>,
    /// Namespace name -> index.
    ns_ids: HashMap<String, u32>,
    /// The lines of each namespace, in log order.
    ns_lines: Vec<Vec<u32>>,
    /// The namespace of each line (`u32::MAX` when none is known).
    line_ns: Vec<u32>,
    /// Record id -> its ops.
    records: HashMap<String, RecordOps>,
    /// AtomRec's `anon:` labels of other users' notes -> record id (only
    /// for families whose recall is collaborative).
    anon: HashMap<String, String>,
    /// Records created, per kind.
    pub kinds: BTreeMap<String, usize>,
    /// Ops, per kind.
    pub op_kinds: BTreeMap<String, usize>,
    /// Seconds the build took.
    pub build_s: f64,
    /// Plain bytes spilled.
    pub plain_bytes: u64,
}

#[derive(Deserialize)]
struct PeekLine<'a> {
    seq: u64,
    #[serde(borrow)]
    op: PeekOp<'a>,
}

#[derive(Deserialize)]
struct PeekOp<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    from: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    into: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    record: Option<PeekRecord<'a>>,
}

#[derive(Deserialize)]
struct PeekRecord<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    namespace: Cow<'a, str>,
    kind: RecordKind,
}

/// A record kind's name as the log spells it (`preference_chunk`, or the
/// custom name).
pub fn kind_name(kind: &RecordKind) -> String {
    match kind {
        RecordKind::Custom(c) => c.clone(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    }
}

impl OpIndex {
    /// Index the op log at `path` (`.zst` or plain); `collaborative` adds
    /// the `anon:` labels of every created record.
    pub fn build(path: &Path, collaborative: bool) -> Result<Self, UiError> {
        let started = Instant::now();
        let io = |e: std::io::Error| UiError::Io(format!("{}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(io)?;
        let input: Box<dyn Read> = if path.extension().is_some_and(|e| e == "zst") {
            Box::new(zstd::Decoder::new(file).map_err(io)?)
        } else {
            Box::new(file)
        };
        let mut input = BufReader::with_capacity(1 << 20, input);
        let spill = tempfile::tempfile().map_err(|e| UiError::Io(format!("spill file: {e}")))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, spill);
        let mut ix = OpIndex {
            reader: Mutex::new(None),
            offsets: Vec::new(),
            seqs: Vec::new(),
            seqs_sorted: true,
            namespaces: Vec::new(),
            ns_ids: HashMap::new(),
            ns_lines: Vec::new(),
            line_ns: Vec::new(),
            records: HashMap::new(),
            anon: HashMap::new(),
            kinds: BTreeMap::new(),
            op_kinds: BTreeMap::new(),
            build_s: 0.0,
            plain_bytes: 0,
        };
        let mut buf = Vec::with_capacity(4096);
        let mut offset = 0u64;
        loop {
            buf.clear();
            let n = input.read_until(b'\n', &mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
            if text.iter().all(u8::is_ascii_whitespace) {
                // A blank line is spilled (offsets stay exact) but not indexed.
                out.write_all(&buf).map_err(io)?;
                offset += n as u64;
                continue;
            }
            let line_no = u32::try_from(ix.offsets.len())
                .map_err(|_| UiError::Io(format!("{}: too many lines", path.display())))?;
            let peek: PeekLine<'_> = serde_json::from_slice(text).map_err(|e| {
                UiError::Io(format!(
                    "{}: op line {}: {e}",
                    path.display(),
                    ix.offsets.len() + 1
                ))
            })?;
            ix.index_line(line_no, &peek, collaborative);
            ix.offsets.push(offset);
            if ix.seqs.last().is_some_and(|&s| s > peek.seq) {
                ix.seqs_sorted = false;
            }
            ix.seqs.push(peek.seq);
            out.write_all(text).map_err(io)?;
            out.write_all(b"\n").map_err(io)?;
            offset += text.len() as u64 + 1;
        }
        let spill = out
            .into_inner()
            .map_err(|e| UiError::Io(format!("spill file: {}", e.error())))?;
        ix.reader = Mutex::new(Some(spill));
        ix.offsets.push(offset);
        ix.plain_bytes = offset;
        ix.build_s = started.elapsed().as_secs_f64();
        Ok(ix)
    }

    fn ns_id(&mut self, ns: &str) -> u32 {
        if let Some(&k) = self.ns_ids.get(ns) {
            return k;
        }
        let k = self.namespaces.len() as u32;
        self.namespaces.push(ns.to_string());
        self.ns_ids.insert(ns.to_string(), k);
        self.ns_lines.push(Vec::new());
        k
    }

    fn index_line(&mut self, line: u32, peek: &PeekLine<'_>, collaborative: bool) {
        let op = &peek.op;
        *self.op_kinds.entry(op.op.to_string()).or_insert(0) += 1;
        let target: Option<&str> = op
            .id
            .as_deref()
            .or(op.from.as_deref())
            .or(op.into.as_deref())
            .or(op.record.as_ref().map(|r| r.id.as_ref()));
        let mut ns = None;
        if let (Some(r), "create") = (&op.record, op.op.as_ref()) {
            let k = self.ns_id(&r.namespace);
            *self.kinds.entry(kind_name(&r.kind)).or_insert(0) += 1;
            if collaborative {
                let label = evomem_core::anon_label(&evomem_core::MemoryId::new(r.id.as_ref()));
                self.anon.insert(label, r.id.to_string());
            }
            ns = Some(k);
        }
        if let Some(t) = target {
            match self.records.get_mut(t) {
                Some(r) => {
                    r.last = line;
                    ns = ns.or(Some(r.namespace));
                }
                None => {
                    // A record first seen without its create: its namespace
                    // from MARS's `user:<U>:` id prefix, when it has one.
                    let k = match ns {
                        Some(k) => Some(k),
                        None => user_prefix(t).map(|u| self.ns_id(&format!("user:{u}"))),
                    };
                    if let Some(k) = k {
                        self.records.insert(
                            t.to_string(),
                            RecordOps {
                                first: line,
                                last: line,
                                namespace: k,
                            },
                        );
                    }
                    ns = k;
                }
            }
        }
        let k = ns.unwrap_or(u32::MAX);
        if let Some(lines) = self.ns_lines.get_mut(k as usize) {
            lines.push(line);
        }
        self.line_ns.push(k);
    }

    /// Ops in the log.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    /// True when the log has no op.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Every namespace with its op count, in name order.
    pub fn namespaces(&self) -> Vec<(&str, usize)> {
        let mut v: Vec<(&str, usize)> = self
            .namespaces
            .iter()
            .zip(&self.ns_lines)
            .map(|(n, l)| (n.as_str(), l.len()))
            .collect();
        v.sort_by(|a, b| natural(a.0, b.0));
        v
    }

    /// The op lines of a namespace.
    pub fn lines_of(&self, ns: &str) -> Option<&[u32]> {
        let k = *self.ns_ids.get(ns)?;
        self.ns_lines.get(k as usize).map(Vec::as_slice)
    }

    /// The line of op `seq`.
    pub fn line_of_seq(&self, seq: u64) -> Option<u32> {
        if self.seqs_sorted {
            self.seqs.binary_search(&seq).ok().map(|k| k as u32)
        } else {
            self.seqs.iter().position(|&s| s == seq).map(|k| k as u32)
        }
    }

    /// The seq of a line.
    pub fn seq_of(&self, line: u32) -> Option<u64> {
        self.seqs.get(line as usize).copied()
    }

    /// The namespace of a line.
    pub fn namespace_of_line(&self, line: u32) -> Option<&str> {
        let k = *self.line_ns.get(line as usize)?;
        self.namespaces.get(k as usize).map(String::as_str)
    }

    /// A record's ops, by its id or (collaborative families) its `anon:`
    /// label; with the resolved id and namespace.
    pub fn record(&self, id: &str) -> Option<(String, RecordOps, &str)> {
        let real = self.anon.get(id).map(String::as_str).unwrap_or(id);
        let r = *self.records.get(real)?;
        let ns = self.namespaces.get(r.namespace as usize)?;
        Some((real.to_string(), r, ns.as_str()))
    }

    /// The raw text of a line.
    pub fn raw(&self, line: u32) -> Result<String, UiError> {
        let k = line as usize;
        let (Some(&start), Some(&end)) = (self.offsets.get(k), self.offsets.get(k + 1)) else {
            return Err(UiError::NotFound {
                what: "op line",
                id: line.to_string(),
            });
        };
        let len = usize::try_from(end - start).unwrap_or(0);
        let mut bytes = vec![0u8; len];
        let mut guard = self
            .reader
            .lock()
            .map_err(|_| UiError::Io("spill reader poisoned".into()))?;
        let f = guard
            .as_mut()
            .ok_or_else(|| UiError::Io("spill file not written".into()))?;
        let io = |e: std::io::Error| UiError::Io(format!("spill file: {e}"));
        f.seek(SeekFrom::Start(start)).map_err(io)?;
        f.read_exact(&mut bytes).map_err(io)?;
        drop(guard);
        let text = String::from_utf8_lossy(&bytes);
        Ok(text.trim_end().to_string())
    }

    /// One op, parsed.
    pub fn op(&self, line: u32) -> Result<LoggedOp, UiError> {
        let raw = self.raw(line)?;
        serde_json::from_str(&raw).map_err(|e| UiError::Io(format!("op line {}: {e}", line + 1)))
    }

    /// Ops of the lines given, parsed, in order.
    pub fn ops(&self, lines: &[u32]) -> Result<Vec<LoggedOp>, UiError> {
        lines.iter().map(|&l| self.op(l)).collect()
    }

    /// One line on the index (for the log).
    pub fn describe(&self) -> String {
        format!(
            "{} ops, {} namespaces, {} records, {:.1} MB plain, indexed in {:.1} s",
            self.len(),
            self.namespaces.len(),
            self.records.len(),
            self.plain_bytes as f64 / 1e6,
            self.build_s
        )
    }
}

/// The user of a MARS-style id `user:<U>:...`.
fn user_prefix(id: &str) -> Option<&str> {
    let rest = id.strip_prefix("user:")?;
    let (u, _) = rest.split_once(':')?;
    Some(u)
}

/// Compare names with numbers in them as numbers (`user:9` before `user:10`).
pub fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| -> (String, Option<u64>) {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(s.len() - digits);
        (head.to_string(), tail.parse().ok())
    };
    let (ha, na) = split(a);
    let (hb, nb) = split(b);
    ha.cmp(&hb).then(na.cmp(&nb)).then(a.cmp(b))
}
