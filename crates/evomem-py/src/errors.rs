//! The Python exceptions of the native module, and the conversions from the
//! Rust errors that raise them.
//!
//! `DataError` is a `ValueError` (bad rows, files or formats); `EvalError`
//! a `RuntimeError` (a run that could not complete), with `PolicyError`
//! (a policy's method failed, Python exceptions included) and `LeakError`
//! (the leak canary caught a policy citing what the protocol hides) below it.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;

create_exception!(
    evomem,
    DataError,
    PyValueError,
    "A dataset could not be loaded or built: the message names the file or row, and the field."
);
create_exception!(
    evomem,
    EvalError,
    PyRuntimeError,
    "An evaluation could not be run or completed."
);
create_exception!(
    evomem,
    PolicyError,
    EvalError,
    "A policy failed; the message names the policy and the method (for a Python policy, with the Python exception)."
);
create_exception!(
    evomem,
    LeakError,
    EvalError,
    "The leak canary caught a policy writing memory from an interaction the protocol had not shown it."
);

/// The marker that starts a leak canary's message inside a policy error.
pub const LEAK_MARK: &str = "leak canary:";

/// The Python exception for an evaluation error: leaks and policy failures
/// get their own classes.
pub fn eval_err(e: evomem_eval::EvalError) -> PyErr {
    use evomem_eval::EvalError as E;
    let msg = e.to_string();
    if matches!(e, E::Policy { .. }) && msg.contains(LEAK_MARK) {
        LeakError::new_err(msg)
    } else if matches!(e, E::Policy { .. } | E::Store { .. }) {
        PolicyError::new_err(msg)
    } else if matches!(e, E::Data(_) | E::Dataset { .. }) {
        DataError::new_err(msg)
    } else {
        EvalError::new_err(msg)
    }
}
