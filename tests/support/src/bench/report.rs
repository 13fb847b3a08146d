//! `benchmarks.md`, which several benchmarks write: each owns one block of
//! it between its own markers, and replaces only that block, so that the
//! prose around it and the other benchmarks' blocks survive.

use std::path::Path;

/// Writes `block`, which starts with the marker `begin` and ends with
/// `end`, into `benchmarks.md` under `out`: in place of the old block
/// between those markers when the file has one, appended otherwise (a new
/// file starts with a heading).
pub fn write_report(out: &Path, begin: &str, end: &str, block: &str) {
    let path = out.join("benchmarks.md");
    let block = block.trim_end();
    let text = match std::fs::read_to_string(&path) {
        Ok(old) => match (old.find(begin), old.find(end)) {
            (Some(b), Some(e)) if b < e => {
                format!("{}{block}{}", &old[..b], &old[e + end.len()..])
            }
            _ => format!("{}\n\n{block}\n", old.trim_end()),
        },
        Err(_) => format!("# Benchmarks\n\n{block}\n"),
    };
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    println!("wrote {}", path.display());
}

#[cfg(test)]
mod tests {
    use super::write_report;

    const BEGIN: &str = "<!-- BEGIN -->";
    const END: &str = "<!-- END -->";

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sta-report-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn only_the_block_between_the_markers_is_replaced() {
        let dir = dir("replace");
        let path = dir.join("benchmarks.md");
        std::fs::write(
            &path,
            format!("# B\n\nprose\n\n{BEGIN}\nold\n{END}\n\nmore\n"),
        )
        .unwrap();
        write_report(&dir, BEGIN, END, &format!("{BEGIN}\nnew\n{END}\n"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# B\n\nprose\n\n{BEGIN}\nnew\n{END}\n\nmore\n")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_block_the_file_lacks_is_appended_and_a_new_file_gets_a_heading() {
        let dir = dir("append");
        let path = dir.join("benchmarks.md");
        write_report(&dir, BEGIN, END, &format!("{BEGIN}\none\n{END}"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# Benchmarks\n\n{BEGIN}\none\n{END}\n")
        );
        write_report(
            &dir,
            "<!-- B2 -->",
            "<!-- E2 -->",
            "<!-- B2 -->\ntwo\n<!-- E2 -->",
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# Benchmarks\n\n{BEGIN}\none\n{END}\n\n<!-- B2 -->\ntwo\n<!-- E2 -->\n")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
