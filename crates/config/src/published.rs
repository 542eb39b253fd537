//! What a host publishes of its fleet.toml on a shared database ([`published_text`]), and the
//! digest hosts compare to tell whether a host's file differs from the config in force
//! ([`published_digest`]).
//!
//! Anyone who can read fleet's tables reads the published text, so it never holds the password
//! of the `database` URL: that is masked, and everything else is kept byte for byte. Hosts may
//! connect with credentials of their own (the `database` key is a host's own: a host applying
//! a published config keeps its file's), so the digest is taken of the masked text on both
//! sides: two files that differ only by that password have the same digest, and the digest a
//! heartbeat carries says nothing about the password either.
//!
//! Pure functions of the text: nothing here reads a file or the database.

use std::borrow::Cow;
use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::host::digest;

/// `text`, a fleet.toml, as a host publishes it for the fleet: the same bytes, but for the
/// password of its top-level `database` URL — in the credentials (`user:PASSWORD@`) or as the
/// `password` parameter — which becomes [`store::PASSWORD_MASK`]. A `database` value that is
/// not a `postgresql://` URL (a file no host would accept) is masked whole, and so is every
/// line setting `database` in a text that does not parse as TOML. Masking twice changes
/// nothing more; a text with nothing to mask comes back borrowed.
pub fn published_text(text: &str) -> Cow<'_, str> {
    let Ok(root) = DeTable::parse(text) else {
        return mask_lines(text);
    };
    let Some(value) = root.get_ref().get("database") else {
        return Cow::Borrowed(text);
    };
    let DeValue::String(url) = value.get_ref() else {
        return mask_lines(text);
    };
    let is_url = url.starts_with("postgresql://") || url.starts_with("postgres://");
    let masked = if is_url {
        match store::mask_postgres_password(url) {
            Cow::Borrowed(_) => return Cow::Borrowed(text),
            Cow::Owned(masked) => masked,
        }
    } else if url.as_ref() == store::PASSWORD_MASK {
        return Cow::Borrowed(text);
    } else {
        store::PASSWORD_MASK.to_string()
    };
    Cow::Owned(replace(text, value.span(), &basic_string(&masked)))
}

/// The digest hosts compare: that of `text`'s [`published_text`] (bytes that are not UTF-8 are
/// read as the replacement character first). A host's heartbeat carries its local file's, and
/// a file differs from the published config when its digest is not the published text's.
pub fn published_digest(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    digest(published_text(&text).as_bytes())
}

/// `text` with the bytes in `span` replaced by `with`.
fn replace(text: &str, span: Range<usize>, with: &str) -> String {
    let mut out = String::with_capacity(text.len() + with.len());
    out.push_str(&text[..span.start]);
    out.push_str(with);
    out.push_str(&text[span.end..]);
    out
}

/// `s` as a TOML basic string, quotes included.
fn basic_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A text that is not TOML (or whose `database` is not a string): every line that sets a key
/// named `database` has its whole value replaced by the mask, since where the password lies in
/// it cannot be known.
fn mask_lines(text: &str) -> Cow<'_, str> {
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        let Some(eq) = database_assignment(line) else {
            out.push_str(line);
            continue;
        };
        let ending = &line[line.trim_end_matches(['\r', '\n']).len()..];
        let masked = format!(
            "{} {}{ending}",
            &line[..=eq],
            basic_string(store::PASSWORD_MASK)
        );
        changed |= masked != line;
        out.push_str(&masked);
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// The byte offset of the `=` when `line` sets a key named `database` (bare or quoted).
fn database_assignment(line: &str) -> Option<usize> {
    let t = line.trim_start();
    let rest = ["database", "\"database\"", "'database'"]
        .iter()
        .find_map(|k| t.strip_prefix(k))?;
    let after = rest.trim_start();
    after.starts_with('=').then(|| line.len() - after.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "max_concurrency = 2\n\n[projects.p]\ncommand = [\"true\"]\n";

    fn with_database(value: &str) -> String {
        format!("# the fleet\ndatabase = {value} # shared\n{BODY}")
    }

    #[test]
    fn only_the_password_is_masked() {
        let text = with_database("\"postgresql://fleet:hunter2@db.internal:5432/fleet\"");
        let published = published_text(&text);
        assert_eq!(
            published,
            with_database("\"postgresql://fleet:********@db.internal:5432/fleet\"")
        );
        assert_eq!(published_text(&published), published, "masking twice");
        // The text published is still a config this build reads.
        let c = crate::Config::parse(&published, std::path::Path::new("fleet.toml"));
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn every_way_of_writing_the_password_is_masked() {
        for value in [
            "'postgresql://fleet:hunter2@db/fleet'",
            "\"\"\"postgresql://fleet:hunter2@db/fleet\"\"\"",
            "\"postgresql://fleet:hunt\\u0065r2@db/fleet\"",
            "\"postgresql://fleet@db/fleet?password=hunter2\"",
            "\"host=db password=hunter2\"",
        ] {
            let text = with_database(value);
            let published = published_text(&text);
            assert!(!published.contains("hunter2"), "{value}: {published}");
            assert!(!published.contains("hunt\\u0065r2"), "{value}: {published}");
            assert!(
                published.ends_with(&format!(" # shared\n{BODY}")),
                "{published}"
            );
        }
    }

    #[test]
    fn a_text_that_is_not_toml_has_its_database_lines_masked() {
        let text = "database = \"postgresql://u:hunter2@h/d\"\r\nmax_concurrency = = 2\n";
        let published = published_text(text);
        assert_eq!(
            published,
            "database = \"********\"\r\nmax_concurrency = = 2\n"
        );
        let text = " \"database\"=postgresql://u:hunter2@h/d\n[x";
        assert_eq!(published_text(text), " \"database\"= \"********\"\n[x");
    }

    #[test]
    fn nothing_to_mask_is_kept_as_it_is() {
        for text in [
            BODY.to_string(),
            with_database("\"postgresql://fleet@/fleet?host=/run/postgresql\""),
            with_database("'postgresql://fleet@db/fleet'"),
        ] {
            assert!(matches!(published_text(&text), Cow::Borrowed(_)), "{text}");
        }
    }

    /// Files that differ only by the password have one digest; any other difference, the
    /// user's included, changes it.
    #[test]
    fn the_digest_ignores_the_password_alone() {
        let a = with_database("\"postgresql://fleet:one@db/fleet\"");
        let b = with_database("'postgresql://fleet:two@db/fleet'");
        let c = with_database("\"postgresql://other:one@db/fleet\"");
        let d = format!("{a}# edited\n");
        assert_eq!(
            published_digest(a.as_bytes()),
            published_digest(b.as_bytes())
        );
        assert_eq!(
            published_digest(a.as_bytes()),
            published_digest(published_text(&a).as_bytes()),
            "a file against the text it published"
        );
        assert_ne!(
            published_digest(a.as_bytes()),
            published_digest(c.as_bytes())
        );
        assert_ne!(
            published_digest(a.as_bytes()),
            published_digest(d.as_bytes())
        );
    }
}
