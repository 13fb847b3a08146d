//! PNG charts of benchmark figures: grouped bar charts and categorical line
//! charts. plotters maps values to pixels and draws the bars, the lines and
//! the mesh; this module owns the layout (size, palette, where every label
//! goes, how numbers are written) and draws every text itself ([`text`]),
//! because plotters' text spaces letters unevenly.
//!
//! Each chart records the box of every text and data mark it draws
//! ([`Drawn`]), so that tests can check it the way a reader would: no label
//! over another label, a bar or the plot, none off the image.

#[cfg(test)]
mod tests;
mod text;

use std::ops::Range;
use std::path::Path;

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{BoldPoints, DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use text::Typeface;

/// Width and height of every chart, in pixels.
const SIZE: (u32, u32) = (1000, 560);

/// A drawing area on a PNG being drawn, in pixels.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Series colours, in order; series past the end reuse them.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(255, 127, 14),  // orange
    RGBColor(44, 160, 44),   // green
    RGBColor(214, 39, 40),   // red
    RGBColor(148, 103, 189), // purple
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(127, 127, 127), // grey
];

const TITLE_PX: f64 = 24.0;
const AXIS_DESC_PX: f64 = 17.0;
const LABEL_PX: f64 = 14.0;
/// The smallest size category labels shrink to when a word is wider than its slot.
const MIN_LABEL_PX: f64 = 11.0;
const VALUE_PX: f64 = 12.0;
const LEGEND_PX: f64 = 15.0;

/// Labelled y ticks plotters may choose, at most.
const Y_TICKS: usize = 10;
/// Space around the chart, in pixels.
const PAD: i32 = 10;
/// The axes' tick marks, outward.
const TICK_MARK: i32 = 5;
/// From an axis to its tick labels, past the tick marks.
const TICK_GAP: i32 = TICK_MARK + 4;
/// From a block of tick labels to the axis description beyond it.
const DESC_GAP: i32 = 10;
/// Between a category's label and its neighbour's, at least.
const SLOT_GAP: i32 = 8;
/// Between a bar's top and its value.
const VALUE_GAP: i32 = 2;

/// One named series of values, one value per category.
#[derive(Debug)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// `values[i]` belongs to `categories[i]`; non-finite values are not drawn.
    pub values: Vec<f64>,
}

/// A horizontal reference line across a bar chart (a ceiling, a goal),
/// labelled beyond the plot's right edge.
#[derive(Debug)]
pub struct Rule {
    pub value: f64,
    pub label: String,
}

/// A grouped bar chart: one group per category, one bar per series, a legend.
/// `log_y`: logarithmic y axis (values <= 0 are skipped). Writes a PNG of 1000x560 px.
///
/// Non-finite values are skipped. Every bar carries its value above it when
/// every value fits the width of its bar, and none does otherwise (the
/// report's tables give the figures). A category's label wraps at spaces to
/// fit its group. Returns an error when there is nothing to draw, when a
/// series' length differs from the number of categories, or when the font
/// or the file cannot be had.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
    log_y: bool,
) -> Result<(), String> {
    grouped_bars_with_rules(path, title, y_label, categories, series, log_y, &[])
}

/// [`grouped_bars`] with horizontal reference lines drawn over the bars,
/// each labelled to the right of the plot; the y axis spans the lines too.
/// A line whose value cannot be drawn on the axis (not finite, or <= 0 on a
/// log axis) is skipped.
pub fn grouped_bars_with_rules(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
    log_y: bool,
    rules: &[Rule],
) -> Result<(), String> {
    draw_grouped_bars(path, title, y_label, categories, series, log_y, rules)
        .map(|drawn| drawn.warn(path))
}

/// Points joined by lines: x is categorical (e.g. "1 GiB", "100 GiB", "10 TiB"),
/// one line per series with markers, a legend, y from 0. Writes a 1000x560 PNG.
///
/// Non-finite values are skipped (the line breaks there). Returns an error
/// when there is nothing to draw, when a series' length differs from the
/// number of categories, or when the font or the file cannot be had.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
) -> Result<(), String> {
    draw_lines(path, title, x_label, y_label, categories, series).map(|drawn| drawn.warn(path))
}

/// A rectangle of pixels on the image: `x0..x1` by `y0..y1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn overlaps(&self, other: &Rect) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }

    fn within(&self, outer: &Rect) -> bool {
        self.x0 >= outer.x0 && self.x1 <= outer.x1 && self.y0 >= outer.y0 && self.y1 <= outer.y1
    }

    /// The smallest rectangle holding both.
    fn union(&self, other: &Rect) -> Rect {
        Rect {
            x0: self.x0.min(other.x0),
            y0: self.y0.min(other.y0),
            x1: self.x1.max(other.x1),
            y1: self.y1.max(other.y1),
        }
    }

    fn shifted_y(&self, dy: i32) -> Rect {
        Rect {
            y0: self.y0 + dy,
            y1: self.y1 + dy,
            ..*self
        }
    }
}

/// What a text on a chart is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Title,
    Legend,
    /// "ms", "volume capacity": what an axis measures, and in what unit.
    AxisDesc,
    /// A category under the x axis (one line of it).
    XTick,
    /// A number beside the y axis.
    YTick,
    /// A bar's value above it.
    Value,
    /// A reference line's name, beyond the plot's right edge.
    RuleLabel,
}

/// A text as drawn.
#[derive(Debug, Clone)]
struct Placed {
    role: Role,
    text: String,
    rect: Rect,
}

/// What a chart drew where, in pixels of the image.
#[derive(Debug)]
struct Drawn {
    /// The whole image.
    image: Rect,
    /// Inside the axes.
    plot: Rect,
    /// The legend's marks and names.
    legend: Rect,
    texts: Vec<Placed>,
    /// Bars, and line charts' point markers.
    marks: Vec<Rect>,
    /// Reference lines, as the band of pixels each covers.
    rules: Vec<Rect>,
}

impl Drawn {
    /// What a reader would trip over, one sentence each: a text off the
    /// image, over another text, over a bar, a point or a line, or (but
    /// for a bar's value) inside the plot; a legend over the plot; values on
    /// some bars and not on others. A chart drawn well has none.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, t) in self.texts.iter().enumerate() {
            if !t.rect.within(&self.image) {
                problems.push(format!("{:?} {:?} leaves the image", t.role, t.text));
            }
            for u in &self.texts[i + 1..] {
                if t.rect.overlaps(&u.rect) {
                    problems.push(format!(
                        "{:?} {:?} overlaps {:?} {:?}",
                        t.role, t.text, u.role, u.text
                    ));
                }
            }
            if self.marks.iter().any(|m| t.rect.overlaps(m)) {
                problems.push(format!("{:?} {:?} overlaps the data", t.role, t.text));
            }
            if self.rules.iter().any(|r| t.rect.overlaps(r)) {
                problems.push(format!(
                    "{:?} {:?} crosses a reference line",
                    t.role, t.text
                ));
            }
            let inside = t.rect.overlaps(&self.plot);
            if inside != (t.role == Role::Value) {
                let place = if inside { "inside" } else { "outside" };
                problems.push(format!("{:?} {:?} is {place} the plot", t.role, t.text));
            }
        }
        if self.legend.overlaps(&self.plot) {
            problems.push("the legend overlaps the plot".to_owned());
        }
        let values = self.texts(Role::Value).count();
        if values != 0 && values != self.marks.len() {
            problems.push(format!(
                "{values} of {} bars carry their value",
                self.marks.len()
            ));
        }
        problems
    }

    fn texts(&self, role: Role) -> impl Iterator<Item = &Placed> {
        self.texts.iter().filter(move |t| t.role == role)
    }

    /// Reports [`Drawn::problems`] on stderr: a full-size run draws figures
    /// no test has seen, and whoever runs it should know which chart to open.
    fn warn(self, path: &Path) {
        for problem in self.problems() {
            eprintln!("plot {}: {problem}", path.display());
        }
    }
}

/// The image being drawn, the font, and the record of what went where.
struct Canvas<'a> {
    /// The whole image, unshifted: its coordinates are the image's pixels.
    area: Area<'a>,
    face: &'static Typeface,
    texts: Vec<Placed>,
}

impl<'a> Canvas<'a> {
    fn new(path: &'a Path) -> Result<Self, String> {
        let face = Typeface::system()?;
        let area = BitMapBackend::new(path, SIZE).into_drawing_area();
        area.fill(&WHITE).map_err(err)?;
        Ok(Canvas {
            area,
            face,
            texts: Vec::new(),
        })
    }

    /// Draws `text` reading left to right, with `anchor` of its box at `at`.
    fn text(
        &mut self,
        role: Role,
        text: &str,
        at: (i32, i32),
        anchor: (HPos, VPos),
        px: f64,
        colour: RGBAColor,
    ) -> Result<Rect, String> {
        let (w, h) = self.face.size(text, px);
        let x0 = match anchor.0 {
            HPos::Left => at.0,
            HPos::Center => at.0 - w / 2,
            HPos::Right => at.0 - w,
        };
        let y0 = match anchor.1 {
            VPos::Top => at.1,
            VPos::Center => at.1 - h / 2,
            VPos::Bottom => at.1 - h,
        };
        self.face
            .draw(&self.area, text, (x0, y0), px, colour, true)?;
        Ok(self.record(role, text, (x0, y0), (w, h)))
    }

    /// Draws `text` turned a quarter left, reading bottom to top, centred on `centre`.
    fn turned_text(
        &mut self,
        role: Role,
        text: &str,
        centre: (i32, i32),
        px: f64,
    ) -> Result<Rect, String> {
        let (w, h) = self.face.size(text, px);
        let top_left = (centre.0 - h / 2, centre.1 - w / 2);
        self.face
            .draw(&self.area, text, top_left, px, BLACK.to_rgba(), false)?;
        Ok(self.record(role, text, top_left, (h, w)))
    }

    fn record(&mut self, role: Role, text: &str, top_left: (i32, i32), size: (i32, i32)) -> Rect {
        let rect = Rect {
            x0: top_left.0,
            y0: top_left.1,
            x1: top_left.0 + size.0,
            y1: top_left.1 + size.1,
        };
        self.texts.push(Placed {
            role,
            text: text.to_owned(),
            rect,
        });
        rect
    }

    /// Draws the title centred at the top, shrunk if need be to fit the
    /// width; returns where the rest begins.
    fn title(&mut self, title: &str) -> Result<i32, String> {
        let mut px = TITLE_PX;
        while px > LABEL_PX && self.face.width(title, px) > SIZE.0 as i32 - 2 * PAD {
            px -= 1.0;
        }
        let rect = self.text(
            Role::Title,
            title,
            (SIZE.0 as i32 / 2, 8),
            (HPos::Center, VPos::Top),
            px,
            BLACK.to_rgba(),
        )?;
        Ok(rect.y1 + PAD)
    }

    /// Draws the legend in a column at the right, as wide as the longest
    /// series name needs; returns the column's box.
    fn legend(&mut self, series: &[Series], mark: LegendMark, top: i32) -> Result<Rect, String> {
        let widest = series
            .iter()
            .map(|s| self.face.width(&s.name, LEGEND_PX))
            .max()
            .unwrap_or(0);
        // Mark and gap (36 px), the name, 14 px to the edge; at most 40% of the width.
        let width = (widest + 50).clamp(120, SIZE.0 as i32 * 2 / 5);
        let x0 = SIZE.0 as i32 - width;
        let mut used = Rect {
            x0,
            y0: top,
            x1: x0,
            y1: top,
        };
        for (i, s) in series.iter().enumerate() {
            let c = colour(i);
            let y = top + 14 + 26 * i as i32;
            match mark {
                LegendMark::Swatch => self
                    .area
                    .draw(&Rectangle::new(
                        [(x0 + 4, y - 7), (x0 + 26, y + 7)],
                        c.filled(),
                    ))
                    .map_err(err)?,
                LegendMark::Line => {
                    self.area
                        .draw(&PathElement::new(
                            vec![(x0 + 2, y), (x0 + 28, y)],
                            c.stroke_width(3),
                        ))
                        .map_err(err)?;
                    self.area
                        .draw(&Circle::new((x0 + 15, y), 5, c.filled()))
                        .map_err(err)?;
                }
            }
            let name = self.text(
                Role::Legend,
                &s.name,
                (x0 + 36, y),
                (HPos::Left, VPos::Center),
                LEGEND_PX,
                BLACK.to_rgba(),
            )?;
            used = used.union(&name).union(&Rect {
                x0: x0 + 2,
                y0: y - 7,
                x1: x0 + 29,
                y1: y + 8,
            });
        }
        Ok(used)
    }
}

/// How the legend marks a series.
#[derive(Debug, Clone, Copy)]
enum LegendMark {
    Swatch,
    Line,
}

/// A y axis: its range, linear or logarithmic, and its labelled ticks.
#[derive(Debug)]
enum YAxis {
    Linear(Range<f64>),
    Log(Range<f64>),
}

impl YAxis {
    /// A linear axis from 0 (or below, for negative values) with headroom.
    fn linear(lo: f64, hi: f64) -> YAxis {
        YAxis::Linear(padded_linear(lo.min(0.0), hi.max(0.0)))
    }

    /// A logarithmic axis over whole decades around `lo..hi`, with at least
    /// a seventh of a decade above `hi` for the values over the bars.
    fn log(lo: f64, hi: f64) -> YAxis {
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf((hi.log10() + 0.15).ceil()).max(lo * 10.0);
        YAxis::Log(lo..hi)
    }

    fn is_log(&self) -> bool {
        matches!(self, YAxis::Log(_))
    }

    /// Where bars start.
    fn base(&self) -> f64 {
        match self {
            YAxis::Linear(_) => 0.0,
            YAxis::Log(r) => r.start,
        }
    }

    /// The values plotters labels (its bold mesh lines), with their labels.
    fn ticks(&self) -> Vec<(f64, String)> {
        let values = match self {
            YAxis::Linear(r) => RangedCoordf64::from(r.clone()).key_points(BoldPoints(Y_TICKS)),
            YAxis::Log(r) => LogCoord::from(r.clone().log_scale()).key_points(BoldPoints(Y_TICKS)),
        };
        let labels = tick_labels(&values, self.is_log());
        values.into_iter().zip(labels).collect()
    }
}

/// What the frame of a chart shows: everything but the data.
struct Frame<'s> {
    title: &'s str,
    y_desc: &'s str,
    x_desc: Option<&'s str>,
    categories: &'s [String],
    /// Where category `i` sits on the x axis.
    category_x: fn(usize) -> f64,
    /// The x axis' range, which holds one slot per category.
    x_range: Range<f64>,
    series: &'s [Series],
    mark: LegendMark,
    /// Texts to be drawn beyond the plot's right edge; the margin fits them.
    right_labels: Vec<String>,
}

type Chart<'a, Y> = ChartContext<'a, BitMapBackend<'a>, Cartesian2d<Slots, Y>>;

/// Draws the title, the legend, the mesh, both axes' labels and
/// descriptions; returns the chart to draw the data into, and the plot's
/// box and the legend's.
fn frame<'a, Y>(
    canvas: &mut Canvas<'a>,
    f: &Frame<'_>,
    y_axis: &YAxis,
    y: Y,
) -> Result<(Chart<'a, Y>, Rect, Rect), String>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let face = canvas.face;
    let body_top = canvas.title(f.title)?;
    let legend = canvas.legend(f.series, f.mark, body_top)?;

    let y_ticks = y_axis.ticks();
    let tick_w = y_ticks
        .iter()
        .map(|(_, l)| face.width(l, LABEL_PX))
        .max()
        .unwrap_or(0);
    let desc_h = face.line_height(AXIS_DESC_PX);
    let left = PAD + desc_h + DESC_GAP + tick_w + TICK_GAP;
    let right = f
        .right_labels
        .iter()
        .map(|l| face.width(l, VALUE_PX) + 2 * TICK_GAP)
        .max()
        .unwrap_or(0)
        .max(20);
    let n = f.categories.len();
    let plot_w = legend.x0 - PAD - left - right;
    let (label_px, wrapped) = wrap_categories(face, f.categories, plot_w / n as i32 - SLOT_GAP);
    let label_h = face.line_height(label_px);
    let label_lines = wrapped.iter().map(Vec::len).max().unwrap_or(1) as i32;
    let bottom = TICK_GAP + label_lines * label_h + f.x_desc.map_or(0, |_| DESC_GAP + desc_h) + PAD;

    let region = canvas
        .area
        .margin(body_top, 0, 0, SIZE.0 as i32 - legend.x0 + PAD);
    let x = Slots::new(f.x_range.clone(), (0..n).map(f.category_x).collect());
    let mut chart = ChartBuilder::on(&region)
        .margin_top(PAD)
        .margin_right(right)
        .x_label_area_size(bottom)
        .y_label_area_size(left)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.set_all_tick_mark_size(TICK_MARK)
        .y_max_light_lines(4)
        .light_line_style(BLACK.mix(0.06))
        .bold_line_style(BLACK.mix(0.15))
        .x_labels(n)
        .y_labels(Y_TICKS)
        // The labels are drawn below, by this module.
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|_| String::new());
    if f.x_desc.is_none() {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(err)?;

    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let plot = Rect {
        x0: xs.start,
        y0: ys.start,
        x1: xs.end,
        y1: ys.end,
    };
    for (value, label) in &y_ticks {
        let (_, py) = chart.backend_coord(&(f.x_range.start, *value));
        canvas.text(
            Role::YTick,
            label,
            (plot.x0 - TICK_GAP, py),
            (HPos::Right, VPos::Center),
            LABEL_PX,
            BLACK.to_rgba(),
        )?;
    }
    canvas.turned_text(
        Role::AxisDesc,
        f.y_desc,
        (PAD + desc_h / 2, (plot.y0 + plot.y1) / 2),
        AXIS_DESC_PX,
    )?;
    for (i, lines) in wrapped.iter().enumerate() {
        let (px, _) = chart.backend_coord(&((f.category_x)(i), y_axis.base()));
        for (l, line) in lines.iter().enumerate() {
            canvas.text(
                Role::XTick,
                line,
                (px, plot.y1 + TICK_GAP + l as i32 * label_h),
                (HPos::Center, VPos::Top),
                label_px,
                BLACK.to_rgba(),
            )?;
        }
    }
    if let Some(desc) = f.x_desc {
        canvas.text(
            Role::AxisDesc,
            desc,
            (
                (plot.x0 + plot.x1) / 2,
                plot.y1 + TICK_GAP + label_lines * label_h + DESC_GAP,
            ),
            (HPos::Center, VPos::Top),
            AXIS_DESC_PX,
            BLACK.to_rgba(),
        )?;
    }
    Ok((chart, plot, legend))
}

fn draw_grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
    log_y: bool,
    rules: &[Rule],
) -> Result<Drawn, String> {
    check_shape(categories, series)?;
    let drawable = |v: f64| v.is_finite() && (!log_y || v > 0.0);
    let (mut lo, mut hi) = value_bounds(series, drawable)
        .ok_or_else(|| format!("{title}: no drawable value (finite, and > 0 on a log axis)"))?;
    let rules: Vec<&Rule> = rules.iter().filter(|r| drawable(r.value)).collect();
    for rule in &rules {
        (lo, hi) = (lo.min(rule.value), hi.max(rule.value));
    }
    let y_axis = if log_y {
        YAxis::log(lo, hi)
    } else {
        YAxis::linear(lo, hi)
    };
    let mut canvas = Canvas::new(path)?;
    let spec = Frame {
        title,
        y_desc: y_label,
        x_desc: None,
        categories,
        // One group spans [i, i + 1).
        category_x: |i| i as f64 + 0.5,
        x_range: 0.0..categories.len() as f64,
        series,
        mark: LegendMark::Swatch,
        right_labels: rules.iter().map(|r| r.label.clone()).collect(),
    };
    let (plot, legend, marks, rule_bands) = match &y_axis {
        YAxis::Linear(r) => {
            let y = RangedCoordf64::from(r.clone());
            let (chart, plot, legend) = frame(&mut canvas, &spec, &y_axis, y)?;
            let (marks, bands) = bars(&mut canvas, &chart, plot, &y_axis, series, &rules)?;
            (plot, legend, marks, bands)
        }
        YAxis::Log(r) => {
            let y = LogCoord::from(r.clone().log_scale());
            let (chart, plot, legend) = frame(&mut canvas, &spec, &y_axis, y)?;
            let (marks, bands) = bars(&mut canvas, &chart, plot, &y_axis, series, &rules)?;
            (plot, legend, marks, bands)
        }
    };
    canvas.finish(path, plot, legend, marks, rule_bands)
}

/// Draws the bars, their values (on every bar or on none), and the
/// reference lines with their labels beyond the plot's right edge.
/// Returns the bars' boxes and the lines' bands.
fn bars<Y>(
    canvas: &mut Canvas<'_>,
    chart: &Chart<'_, Y>,
    plot: Rect,
    y_axis: &YAxis,
    series: &[Series],
    rules: &[&Rule],
) -> Result<(Vec<Rect>, Vec<Rect>), String>
where
    Y: Ranged<ValueType = f64>,
{
    let base = y_axis.base();
    let drawable = |v: f64| v.is_finite() && (!y_axis.is_log() || v > 0.0);
    // Within a group's [i, i + 1): 80% bars, 10% gap on each side.
    let bar_w = 0.8 / series.len() as f64;
    let mut marks = Vec::new();
    let mut values = Vec::new();
    for (s, ser) in series.iter().enumerate() {
        let c = colour(s);
        for (cat, &v) in ser.values.iter().enumerate() {
            if !drawable(v) {
                continue;
            }
            let x0 = cat as f64 + 0.1 + s as f64 * bar_w;
            let x1 = x0 + bar_w;
            chart
                .plotting_area()
                .draw(&Rectangle::new([(x0, base), (x1, v)], c.filled()))
                .map_err(err)?;
            let (px0, py0) = chart.backend_coord(&(x0, v));
            let (px1, py1) = chart.backend_coord(&(x1, base));
            let bar = Rect {
                x0: px0,
                y0: py0.min(py1),
                x1: px1,
                y1: py0.max(py1),
            };
            marks.push(bar);
            values.push((bar, compact(v)));
        }
    }

    let mut bands: Vec<Rect> = Vec::new();
    for rule in rules {
        chart
            .plotting_area()
            .draw(&PathElement::new(
                vec![
                    (0.0, rule.value),
                    (series[0].values.len() as f64, rule.value),
                ],
                BLACK.mix(0.55).stroke_width(2),
            ))
            .map_err(err)?;
        let (_, py) = chart.backend_coord(&(0.0, rule.value));
        bands.push(Rect {
            x0: plot.x0,
            y0: py - 1,
            x1: plot.x1,
            y1: py + 2,
        });
    }

    // A value sits above its bar, and above any reference line its box
    // would cross. Drawn on every bar if every one fits its bar's width and
    // the plot's height, else on none: a few numbers here and there read as
    // stray marks.
    let face = canvas.face;
    let placed: Vec<(Rect, String)> = values
        .into_iter()
        .map(|(bar, text)| {
            let (w, h) = face.size(&text, VALUE_PX);
            let centre = (bar.x0 + bar.x1) / 2;
            let mut rect = Rect {
                x0: centre - w / 2,
                y0: bar.y0 - VALUE_GAP - h,
                x1: centre - w / 2 + w,
                y1: bar.y0 - VALUE_GAP,
            };
            // Lowest line first, so that a label pushed above one line meets the next.
            let mut by_height: Vec<&Rect> = bands.iter().collect();
            by_height.sort_by_key(|b| std::cmp::Reverse(b.y0));
            for band in by_height {
                if rect.overlaps(band) {
                    rect = rect.shifted_y(band.y0 - VALUE_GAP - rect.y1);
                }
            }
            (rect, text)
        })
        .collect();
    let fits = placed
        .iter()
        .zip(&marks)
        .all(|((rect, _), bar)| rect.x1 - rect.x0 + 2 <= bar.x1 - bar.x0 && rect.within(&plot));
    if fits {
        for (rect, text) in placed {
            canvas.text(
                Role::Value,
                &text,
                (rect.x0, rect.y0),
                (HPos::Left, VPos::Top),
                VALUE_PX,
                BLACK.mix(0.8),
            )?;
        }
    }

    // Labels beyond the right edge, each centred on its line unless the
    // one above it is in the way.
    let mut labels: Vec<(i32, &str)> = rules
        .iter()
        .zip(&bands)
        .map(|(r, b)| (b.y0 + 1, r.label.as_str()))
        .collect();
    labels.sort_by_key(|(y, _)| *y);
    let mut free_from = i32::MIN;
    for (y, label) in labels {
        let h = face.line_height(VALUE_PX);
        let top = (y - h / 2).max(free_from);
        let rect = canvas.text(
            Role::RuleLabel,
            label,
            (plot.x1 + TICK_GAP, top),
            (HPos::Left, VPos::Top),
            VALUE_PX,
            BLACK.mix(0.8),
        )?;
        free_from = rect.y1 + 1;
    }
    Ok((marks, bands))
}

fn draw_lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
) -> Result<Drawn, String> {
    check_shape(categories, series)?;
    let (lo, hi) =
        value_bounds(series, f64::is_finite).ok_or_else(|| format!("{title}: no finite value"))?;
    let y_axis = YAxis::linear(lo, hi);
    let YAxis::Linear(y_range) = &y_axis else {
        unreachable!("YAxis::linear is linear");
    };
    let mut canvas = Canvas::new(path)?;
    let n = categories.len();
    let spec = Frame {
        title,
        y_desc: y_label,
        x_desc: Some(x_label),
        categories,
        category_x: |i| i as f64,
        x_range: -0.5..n as f64 - 0.5,
        series,
        mark: LegendMark::Line,
        right_labels: Vec::new(),
    };
    let (chart, plot, legend) = frame(
        &mut canvas,
        &spec,
        &y_axis,
        RangedCoordf64::from(y_range.clone()),
    )?;

    let mut marks = Vec::new();
    for (s, ser) in series.iter().enumerate() {
        let c = colour(s);
        // Runs of consecutive finite points, each one polyline.
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut run = Vec::new();
        for (i, &v) in ser.values.iter().enumerate() {
            if v.is_finite() {
                run.push((i as f64, v));
            } else if !run.is_empty() {
                runs.push(std::mem::take(&mut run));
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
        let area = chart.plotting_area();
        for points in &runs {
            if points.len() > 1 {
                area.draw(&PathElement::new(points.clone(), c.stroke_width(3)))
                    .map_err(err)?;
            }
            for &p in points {
                area.draw(&Circle::new(p, 5, c.filled())).map_err(err)?;
                let (px, py) = chart.backend_coord(&p);
                marks.push(Rect {
                    x0: px - 5,
                    y0: py - 5,
                    x1: px + 6,
                    y1: py + 6,
                });
            }
        }
    }
    canvas.finish(path, plot, legend, marks, Vec::new())
}

impl Canvas<'_> {
    /// Writes the image; returns what went where.
    fn finish(
        self,
        path: &Path,
        plot: Rect,
        legend: Rect,
        marks: Vec<Rect>,
        rules: Vec<Rect>,
    ) -> Result<Drawn, String> {
        self.area
            .present()
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(Drawn {
            image: Rect {
                x0: 0,
                y0: 0,
                x1: SIZE.0 as i32,
                y1: SIZE.1 as i32,
            },
            plot,
            legend,
            texts: self.texts,
            marks,
            rules,
        })
    }
}

/// Each category's label in lines that fit `width` pixels, broken at
/// spaces, and the size they are set at: [`LABEL_PX`], or smaller (down to
/// [`MIN_LABEL_PX`]) when a single word is wider than `width`.
fn wrap_categories(face: &Typeface, categories: &[String], width: i32) -> (f64, Vec<Vec<String>>) {
    let mut px = LABEL_PX;
    loop {
        let wrapped: Vec<Vec<String>> = categories
            .iter()
            .map(|c| wrap(face, c, px, width))
            .collect();
        let fits = wrapped.iter().flatten().all(|l| face.width(l, px) <= width);
        if fits || px <= MIN_LABEL_PX {
            return (px, wrapped);
        }
        px -= 1.0;
    }
}

/// `text` in as few lines no wider than `width` as breaks at spaces allow,
/// and of those breaks the one whose widest line is narrowest ("create," /
/// "1 VAP", not "create, 1" / "VAP").
fn wrap(face: &Typeface, text: &str, px: f64, width: i32) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    // Greedy filling gives the fewest lines.
    let mut count = 1;
    let mut line = String::new();
    for word in &words {
        let longer = if line.is_empty() {
            (*word).to_owned()
        } else {
            format!("{line} {word}")
        };
        if !line.is_empty() && face.width(&longer, px) > width {
            count += 1;
            line = (*word).to_owned();
        } else {
            line = longer;
        }
    }
    let widest = |lines: &[String]| lines.iter().map(|l| face.width(l, px)).max().unwrap_or(0);
    let mut best: Option<Vec<String>> = None;
    for breaks in break_sets(words.len(), count) {
        let lines: Vec<String> = breaks
            .windows(2)
            .map(|w| words[w[0]..w[1]].join(" "))
            .collect();
        if best.as_ref().is_none_or(|b| widest(&lines) < widest(b)) {
            best = Some(lines);
        }
    }
    best.unwrap_or_else(|| vec![text.to_owned()])
}

/// Every way to cut `words` words into `lines` non-empty runs, each as the
/// indices its runs start at followed by `words`.
fn break_sets(words: usize, lines: usize) -> Vec<Vec<usize>> {
    if lines <= 1 || words <= 1 {
        return vec![vec![0, words]];
    }
    let mut sets = Vec::new();
    for first_end in 1..=words - (lines - 1) {
        for rest in break_sets(words - first_end, lines - 1) {
            let mut set = vec![0];
            set.extend(rest.iter().map(|i| i + first_end));
            sets.push(set);
        }
    }
    sets
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plotting: {e}")
}

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn check_shape(categories: &[String], series: &[Series]) -> Result<(), String> {
    if categories.is_empty() {
        return Err("no categories to plot".into());
    }
    if series.is_empty() {
        return Err("no series to plot".into());
    }
    for s in series {
        if s.values.len() != categories.len() {
            return Err(format!(
                "series {:?} has {} values for {} categories",
                s.name,
                s.values.len(),
                categories.len()
            ));
        }
    }
    Ok(())
}

/// Smallest and largest value that `keep` accepts, if any.
fn value_bounds(series: &[Series], keep: impl Fn(f64) -> bool) -> Option<(f64, f64)> {
    series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|&v| keep(v))
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// A linear axis over `lo..hi` with 10% headroom (and a unit span when empty).
fn padded_linear(lo: f64, hi: f64) -> Range<f64> {
    let span = hi - lo;
    if span <= 0.0 || !span.is_finite() {
        return lo..lo + 1.0;
    }
    let lo = if lo < 0.0 { lo - span * 0.1 } else { lo };
    let hi = if hi > 0.0 { hi + span * 0.1 } else { hi };
    lo..hi
}

/// Labels for an axis' ticks, written alike: on a linear axis one unit
/// suffix for all (k from ten thousand, M from ten million) and as many
/// decimals as the finest tick needs ("0", "5k", "10k"; "0.2", "0.4");
/// on a log axis each decade on its own ("1", "10", "1k", "10k").
fn tick_labels(values: &[f64], log: bool) -> Vec<String> {
    let suffixed = |v: f64| {
        let a = v.abs();
        if a >= 1e6 {
            (v / 1e6, "M")
        } else if a >= 1e3 {
            (v / 1e3, "k")
        } else {
            (v, "")
        }
    };
    if log {
        return values
            .iter()
            .map(|&v| {
                let (v, suffix) = suffixed(v);
                format!("{}{suffix}", trim_decimals(&format!("{v:.3}")))
            })
            .collect();
    }
    let top = values.iter().fold(0f64, |m, v| m.max(v.abs()));
    let (div, suffix) = if top >= 1e7 {
        (1e6, "M")
    } else if top >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let decimals = (0..=6)
        .find(|&d| {
            values.iter().all(|v| {
                let scaled = v / div;
                let shown: f64 = format!("{scaled:.d$}").parse().unwrap_or(f64::NAN);
                (shown - scaled).abs() <= 1e-9 * scaled.abs().max(1.0)
            })
        })
        .unwrap_or(6);
    values
        .iter()
        .map(|v| {
            if *v == 0.0 {
                "0".to_owned()
            } else {
                format!("{:.decimals$}{suffix}", v / div)
            }
        })
        .collect()
}

fn trim_decimals(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// A short rendering of `v`: three significant digits or so, with a k/M/G
/// suffix past ten thousand, and no trailing zeros ("2.5", "10", "1M").
fn compact(v: f64) -> String {
    let a = v.abs();
    let (text, suffix) = if a >= 1e10 {
        (format!("{:.0}", v / 1e9), "G")
    } else if a >= 1e9 {
        (format!("{:.1}", v / 1e9), "G")
    } else if a >= 1e7 {
        (format!("{:.0}", v / 1e6), "M")
    } else if a >= 1e6 {
        (format!("{:.1}", v / 1e6), "M")
    } else if a >= 1e4 {
        (format!("{:.0}", v / 1e3), "k")
    } else if a >= 100.0 || a == 0.0 {
        (format!("{v:.0}"), "")
    } else if a >= 10.0 {
        (format!("{v:.1}"), "")
    } else if a >= 1.0 {
        (format!("{v:.2}"), "")
    } else if a >= 0.001 {
        (format!("{v:.3}"), "")
    } else {
        return format!("{v:.1e}");
    };
    format!("{}{suffix}", trim_decimals(&text))
}

/// A continuous x axis whose only ticks are the given points: the category
/// positions.
struct Slots {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Slots {
    fn new(range: Range<f64>, ticks: Vec<f64>) -> Self {
        Self {
            inner: range.into(),
            ticks,
        }
    }
}

impl Ranged for Slots {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Bold mesh lines at the categories, no light lines.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}
