//! `evomem` from Python: the native module `evomem._evomem`, wrapped by the
//! pure-Python package in `python/evomem`.
//!
//! It exposes the Rust loaders ([`data`]), the evaluation loop with policies
//! written in Python beside the built-in families ([`eval`], [`policy`]) and
//! the project's embedder ([`embed`]); Python policies call the LLM roles
//! through their hub ([`roles`]). Nothing is reimplemented here: every
//! function calls the crate that owns the behaviour (`evomem-eval`'s loaders,
//! protocols, driver, run folder and paired bootstrap; `evomem-embed`'s
//! MiniLM), so a run from Python writes what `evomem eval` writes.
//!
//! The GIL: the evaluation loop runs with the GIL released; it is taken
//! only inside the calls into a Python policy's methods. Rust policies run
//! in parallel as in the CLI; Python policies run one call at a time.

pub mod convert;
pub mod data;
pub mod embed;
pub mod errors;
pub mod eval;
pub mod policy;
pub mod roles;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _evomem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DataError", py.get_type::<errors::DataError>())?;
    m.add("EvalError", py.get_type::<errors::EvalError>())?;
    m.add("PolicyError", py.get_type::<errors::PolicyError>())?;
    m.add("LeakError", py.get_type::<errors::LeakError>())?;
    m.add_class::<data::PyDataset>()?;
    m.add_class::<policy::Ctx>()?;
    m.add_class::<policy::Event>()?;
    m.add_class::<policy::Query>()?;
    m.add_class::<policy::FeedbackEvent>()?;
    m.add_function(wrap_pyfunction!(data::load, m)?)?;
    m.add_function(wrap_pyfunction!(eval::evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(eval::compare_per_user, m)?)?;
    m.add_function(wrap_pyfunction!(eval::replay_ops, m)?)?;
    m.add_function(wrap_pyfunction!(embed::embed_raw, m)?)?;
    m.add(
        "ROLES",
        roles::ROLES
            .iter()
            .map(|(name, role, input)| (*name, *role, *input))
            .collect::<Vec<_>>(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
