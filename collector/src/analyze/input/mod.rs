//! Reading captured files for `opscope analyze`: the paths walked ([`files`]), each
//! file's lines, cut at [`MAX_LINE_BYTES`], with a `.json` file that is one document
//! read item by item ([`document`]), and each line sorted into what it is ([`line`]).

pub mod document;
pub mod files;
pub mod line;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

pub use files::{InputError, Inputs, Skipped, collect_files};
pub use line::{Line, classify};

/// Longest line read; longer lines are cut there (and counted as malformed).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Gives `each` the lines of a file (its number, its text, whether it was cut at
/// [`MAX_LINE_BYTES`]): a `.json` file that is one document gives its items, each as
/// one line numbered by its place in the list. `Err` says why the file was not read,
/// or not to its end (the lines before were given).
pub fn read_lines(path: &Path, mut each: impl FnMut(usize, &str, bool)) -> Result<(), Skipped> {
    let skipped = |reason: String| Skipped::new(path, reason);
    if is_json_name(path)
        && document::read_document(path, &mut |number, text| each(number, text, false))
            .map_err(skipped)?
    {
        return Ok(());
    }
    let mut reader = BufReader::new(files::open(path).map_err(skipped)?);
    let read_failed = |line: usize, err: std::io::Error| {
        skipped(format!(
            "line {line}: {}; the rest of the file is not read",
            files::read_error(&err)
        ))
    };
    let mut buffer = Vec::new();
    let mut number = 0;
    loop {
        buffer.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .map_err(|err| read_failed(number + 1, err))?;
        if read == 0 {
            return Ok(());
        }
        let cut = buffer.last() != Some(&b'\n') && buffer.len() > MAX_LINE_BYTES;
        if cut {
            skip_rest_of_line(&mut reader).map_err(|err| read_failed(number + 1, err))?;
            buffer.truncate(MAX_LINE_BYTES);
        }
        number += 1;
        let text = String::from_utf8_lossy(&buffer);
        each(number, text.trim_end_matches(['\n', '\r']), cut);
    }
}

fn is_json_name(path: &Path) -> bool {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .is_some_and(|name| name.trim_end_matches(".gz").ends_with(".json"))
}

fn skip_rest_of_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|b| *b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(());
            }
            None => {
                let len = available.len();
                reader.consume(len);
            }
        }
    }
}
