//! The charts' text, measured and drawn with `ab_glyph` from a system
//! TrueType font (Debian package `fonts-dejavu-core`), read once per process.
//!
//! plotters draws text with the same font but drops each glyph's left side
//! bearing, so letters sit unevenly ("requ ests/s", "list 1 0"). Here every
//! glyph is placed at its pen position plus its bearing, with kerning, and
//! the box a text is measured to is the box it is drawn in. This module
//! draws pixels; where a text goes is the caller's business.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, GlyphId, PxScale, ScaleFont};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::Area;

/// Font files tried in order; the first that exists is used.
const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/ubuntu/Ubuntu-R.ttf",
];

/// Coverage below this is not worth a pixel.
const MIN_COVERAGE: f32 = 1.0 / 255.0;

/// A font, and how text set in it measures and draws.
#[derive(Debug)]
pub(super) struct Typeface {
    font: FontRef<'static>,
}

impl Typeface {
    /// The system font, read once per process; later calls return the first
    /// outcome. It is also registered as plotters' "sans-serif", which the
    /// mesh asks for even though every label it draws is empty.
    pub(super) fn system() -> Result<&'static Typeface, String> {
        static FACE: OnceLock<Result<Typeface, String>> = OnceLock::new();
        FACE.get_or_init(|| {
            let (path, bytes) = FONT_PATHS
                .iter()
                .find_map(|p| std::fs::read(p).ok().map(|b| (*p, b)))
                .ok_or_else(|| {
                    format!(
                        "no TrueType font found (tried {}); install the Debian package fonts-dejavu-core",
                        FONT_PATHS.join(", ")
                    )
                })?;
            // Both ab_glyph and plotters keep the font for the rest of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            let unusable = || format!("{path}: not a usable TrueType font");
            register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| unusable())?;
            let font = FontRef::try_from_slice(bytes).map_err(|_| unusable())?;
            Ok(Typeface { font })
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    /// Height of a line of text set at `px`: ascent plus descent, in whole pixels.
    pub(super) fn line_height(&self, px: f64) -> i32 {
        let font = self.font.as_scaled(PxScale::from(px as f32));
        (font.ascent() - font.descent()).ceil() as i32
    }

    /// Width of `text` set at `px`: the sum of its advances and kerning, in
    /// whole pixels.
    pub(super) fn width(&self, text: &str, px: f64) -> i32 {
        let font = self.font.as_scaled(PxScale::from(px as f32));
        let (_, width) = self.pen_positions(&font, text);
        width.ceil() as i32
    }

    /// Width and line height of `text` set at `px`.
    pub(super) fn size(&self, text: &str, px: f64) -> (i32, i32) {
        (self.width(text, px), self.line_height(px))
    }

    /// Draws `text` at `px` in `colour` (its alpha scales every pixel's
    /// coverage) into the box whose top left corner is `top_left`, in pixels
    /// of `area`. `upright`: reading left to right; otherwise turned a
    /// quarter left, reading bottom to top, in a box `line_height` wide and
    /// `width` tall.
    pub(super) fn draw(
        &self,
        area: &Area<'_>,
        text: &str,
        top_left: (i32, i32),
        px: f64,
        colour: RGBAColor,
        upright: bool,
    ) -> Result<(), String> {
        let font = self.font.as_scaled(PxScale::from(px as f32));
        let (pens, _) = self.pen_positions(&font, text);
        let width = self.width(text, px);
        let ascent = font.ascent();
        let RGBAColor(r, g, b, alpha) = colour;
        let mut result = Ok(());
        for (id, pen) in pens {
            let glyph = id.with_scale_and_position(px as f32, ab_glyph::point(pen, ascent));
            let Some(outline) = font.outline_glyph(glyph) else {
                continue; // a space
            };
            let bounds = outline.px_bounds();
            outline.draw(|x, y, coverage| {
                if coverage < MIN_COVERAGE || result.is_err() {
                    return;
                }
                // (lx, ly): the pixel in the upright box, from its top left.
                let lx = bounds.min.x as i32 + x as i32;
                let ly = bounds.min.y as i32 + y as i32;
                let at = if upright {
                    (top_left.0 + lx, top_left.1 + ly)
                } else {
                    (top_left.0 + ly, top_left.1 + width - 1 - lx)
                };
                let shade = RGBAColor(r, g, b, alpha * f64::from(coverage.min(1.0)));
                result = area
                    .draw_pixel(at, &shade)
                    .map_err(|e| format!("plotting: {e}"));
            });
        }
        result
    }

    /// Each glyph of `text` with the pen position it is drawn at (advances
    /// plus kerning from 0), and the pen position after the last one.
    fn pen_positions<F: Font>(
        &self,
        font: &impl ScaleFont<F>,
        text: &str,
    ) -> (Vec<(GlyphId, f32)>, f32) {
        let mut pen = 0.0;
        let mut previous: Option<GlyphId> = None;
        let mut glyphs = Vec::with_capacity(text.len());
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = previous {
                pen += font.kern(p, id);
            }
            glyphs.push((id, pen));
            pen += font.h_advance(id);
            previous = Some(id);
        }
        (glyphs, pen)
    }
}
