//! "Did you mean ...?" for misspelt names.

/// The candidate `name` is most plausibly a misspelling of, if any: one that
/// differs only in case, or within a small edit distance (transpositions
/// count as one edit) that leaves most of the name intact.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let len = name.chars().count();
    let limit = (len / 3).clamp(1, 2);
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == name {
            continue;
        }
        let distance = if candidate.eq_ignore_ascii_case(name) {
            0
        } else {
            distance(name, candidate)
        };
        if distance > 0 && (distance > limit || distance >= len) {
            continue;
        }
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the usual table: two rows back, the previous, the current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            let mut best = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
            if i > 0 && j > 0 && a.get(i - 1) == Some(&cb) && b.get(j - 1) == Some(&ca) {
                best = best.min(before[j - 1] + 1);
            }
            current[j + 1] = best;
        }
        before = std::mem::replace(&mut previous, current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let functions = ["exp", "log", "sigmoid", "gelu", "max", "sum"];
        assert_eq!(closest("sigmod", functions), Some("sigmoid"));
        assert_eq!(closest("gleu", functions), Some("gelu"));
        assert_eq!(closest("exps", functions), Some("exp"));
        assert_eq!(closest("foo", functions), None);
        assert_eq!(closest("Q", ["K", "M"]), None);
        assert_eq!(closest("k", ["K", "M"]), Some("K"));
        assert_eq!(closest("xs", ["x", "w"]), Some("x"));
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("ab", "ba"), 1);
    }
}
