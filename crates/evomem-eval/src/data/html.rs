//! Decoding HTML character references (`&amp;`, `&eacute;`, `&#39;`, `&#x27;`)
//! that Amazon-derived titles carry (AgentCF `CDs.item`, iAgent files).
//!
//! Known named references (the Latin-1 set plus common punctuation) and numeric
//! references are decoded; anything else (e.g. the `&B;` in `R&B; Funk`) is
//! left as it is.

/// Names of the code points U+00A0..=U+00FF, in order (HTML 4 Latin-1 set).
const LATIN1: [&str; 96] = [
    "nbsp", "iexcl", "cent", "pound", "curren", "yen", "brvbar", "sect", "uml", "copy", "ordf",
    "laquo", "not", "shy", "reg", "macr", "deg", "plusmn", "sup2", "sup3", "acute", "micro",
    "para", "middot", "cedil", "sup1", "ordm", "raquo", "frac14", "frac12", "frac34", "iquest",
    "Agrave", "Aacute", "Acirc", "Atilde", "Auml", "Aring", "AElig", "Ccedil", "Egrave", "Eacute",
    "Ecirc", "Euml", "Igrave", "Iacute", "Icirc", "Iuml", "ETH", "Ntilde", "Ograve", "Oacute",
    "Ocirc", "Otilde", "Ouml", "times", "Oslash", "Ugrave", "Uacute", "Ucirc", "Uuml", "Yacute",
    "THORN", "szlig", "agrave", "aacute", "acirc", "atilde", "auml", "aring", "aelig", "ccedil",
    "egrave", "eacute", "ecirc", "euml", "igrave", "iacute", "icirc", "iuml", "eth", "ntilde",
    "ograve", "oacute", "ocirc", "otilde", "ouml", "divide", "oslash", "ugrave", "uacute", "ucirc",
    "uuml", "yacute", "thorn", "yuml",
];

/// Other named references worth decoding.
const OTHER: [(&str, char); 22] = [
    ("amp", '&'),
    ("lt", '<'),
    ("gt", '>'),
    ("quot", '"'),
    ("apos", '\''),
    ("lsquo", '\u{2018}'),
    ("rsquo", '\u{2019}'),
    ("sbquo", '\u{201A}'),
    ("ldquo", '\u{201C}'),
    ("rdquo", '\u{201D}'),
    ("bdquo", '\u{201E}'),
    ("ndash", '\u{2013}'),
    ("mdash", '\u{2014}'),
    ("hellip", '\u{2026}'),
    ("bull", '\u{2022}'),
    ("dagger", '\u{2020}'),
    ("trade", '\u{2122}'),
    ("euro", '\u{20AC}'),
    ("OElig", '\u{0152}'),
    ("oelig", '\u{0153}'),
    ("Scaron", '\u{0160}'),
    ("scaron", '\u{0161}'),
];

fn named(name: &str) -> Option<char> {
    if let Some(&(_, c)) = OTHER.iter().find(|(n, _)| *n == name) {
        return Some(c);
    }
    LATIN1
        .iter()
        .position(|n| *n == name)
        .and_then(|p| char::from_u32(0xA0 + p as u32))
}

fn numeric(body: &str) -> Option<char> {
    let code = if let Some(hex) = body.strip_prefix('x').or_else(|| body.strip_prefix('X')) {
        u32::from_str_radix(hex, 16).ok()?
    } else {
        body.parse::<u32>().ok()?
    };
    char::from_u32(code)
}

/// Decode the HTML character references in `s`.
pub(crate) fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        // A reference is at most ~10 characters up to the `;`.
        let decoded = after.find(';').filter(|&semi| semi <= 10).and_then(|semi| {
            let body = &after[..semi];
            let c = match body.strip_prefix('#') {
                Some(num) => numeric(num),
                None => named(body),
            };
            c.map(|c| (c, semi))
        });
        match decoded {
            Some((c, semi)) => {
                out.push(c);
                rest = &after[semi + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::decode_entities;

    #[test]
    fn decodes_known_references_only() {
        assert_eq!(
            decode_entities("Andy &amp; His Grandmother"),
            "Andy & His Grandmother"
        );
        assert_eq!(
            decode_entities("Beyonc&eacute; &#39;B&#x27;"),
            "Beyoncé 'B'"
        );
        assert_eq!(decode_entities("R&B; Funk"), "R&B; Funk");
        assert_eq!(decode_entities("a & b &unknown; &"), "a & b &unknown; &");
        assert_eq!(decode_entities("&nbsp;&yuml;&middot;"), "\u{A0}ÿ·");
    }
}
