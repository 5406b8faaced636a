//! SVG line charts (plotters) for the reports of the arenas (reward against
//! step in the bandit, success rate / memories per task / Cold-Q against
//! epoch in the DB arena) and of `evomem bench scale` (cost curves). One
//! function, one chart, so every plot looks alike. It lives here, not in
//! `evomem-arena`, so that a binary without the arenas can still draw.

use crate::error::EvalError;
use plotters::prelude::*;
use std::path::Path;

/// One line: a name and its points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// Vertical marker lines (phase boundaries), with labels.
pub type Markers<'a> = &'a [(f64, &'a str)];

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> EvalError + '_ {
    move |e| EvalError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Draw `series` as lines with points into `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    markers: Markers<'_>,
) -> Result<(), EvalError> {
    let finite = |v: &f64| v.is_finite();
    let xs = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .filter(finite)
    };
    let ys = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(finite)
    };
    let x_min = xs().fold(f64::INFINITY, f64::min);
    let x_max = xs().fold(f64::NEG_INFINITY, f64::max);
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
        (x_min, x_max)
    } else {
        (0.0, 1.0)
    };
    let y_max = ys().fold(0.0f64, f64::max).max(1e-6) * 1.08;
    let y_min = ys().fold(0.0f64, f64::min);
    let root = SVGBackend::new(path, (860, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_min..x_max, y_min..y_max)
        .map_err(plot_err(path))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(plot_err(path))?;
    for (x, label) in markers {
        chart
            .draw_series(LineSeries::new(
                [(*x, y_min), (*x, y_max)],
                BLACK.mix(0.3).stroke_width(1),
            ))
            .map_err(plot_err(path))?;
        chart
            .draw_series(std::iter::once(Text::new(
                (*label).to_string(),
                (*x, y_max * 0.97),
                ("sans-serif", 12).into_font(),
            )))
            .map_err(plot_err(path))?;
    }
    let dense = series.iter().map(|s| s.points.len()).max().unwrap_or(0) > 60;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(plot_err(path))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        if !dense {
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(plot_err(path))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err(path))?;
    root.present().map_err(plot_err(path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn draws_lines_and_markers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.svg");
        let s = vec![
            Series {
                name: "a".into(),
                points: vec![(0.0, 0.1), (1.0, 0.5), (2.0, f64::NAN)],
            },
            Series {
                name: "b".into(),
                points: vec![(0.0, 0.3), (2.0, 0.2)],
            },
        ];
        line_chart(&p, "t", "x", "y", &s, &[(1.0, "m")]).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.contains("<svg"));
        assert!(
            svg.matches("<polyline").count() >= 3,
            "two series and a marker"
        );
    }
}
