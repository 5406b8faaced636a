//! SVG line charts for the arena reports: [`evomem_eval::plot`], with its
//! error reported as the arena's.

use crate::error::ArenaError;
use evomem_eval::error::EvalError;
use std::path::Path;

pub use evomem_eval::plot::{Markers, Series};

/// Draw `series` as lines with points into `path` (see
/// [`evomem_eval::plot::line_chart`]).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    markers: Markers<'_>,
) -> Result<(), ArenaError> {
    evomem_eval::plot::line_chart(path, title, x_desc, y_desc, series, markers).map_err(|e| match e
    {
        EvalError::Plot { path, message } => ArenaError::Plot { path, message },
        other => ArenaError::Plot {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    })
}
