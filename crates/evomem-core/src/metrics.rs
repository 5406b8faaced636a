//! Ranking metrics math (HR@K, NDCG@K, MRR). Pure functions, no I/O.
//!
//! Filled in by the spine work; see `evomem-eval` for aggregation and the
//! bootstrap.
