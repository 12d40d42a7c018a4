//! Whether a changed path lies inside the contract's declared outputs.

use crate::changes::Change;

/// Whether `change` lies under one of `outputs` (component-wise: `src` covers
/// `src/lib.rs` but not `srcs/x`; `"."` covers everything; no outputs cover
/// nothing). A rename is in scope only when both its old and its new path are.
pub fn in_scope(change: &Change, outputs: &[String]) -> bool {
    let covered = |path: &str| outputs.iter().any(|output| is_under(path, output));
    covered(&change.path) && covered(change.old_path())
}

/// The paths of `changes` outside `outputs` (a rename's old and new path each
/// count), sorted and without repetition.
pub(crate) fn out_of_scope(changes: &[Change], outputs: &[String]) -> Vec<String> {
    let covered = |path: &str| outputs.iter().any(|output| is_under(path, output));
    let mut paths: Vec<String> = changes
        .iter()
        .flat_map(|change| [change.old_path(), change.path.as_str()])
        .filter(|path| !covered(path))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// Whether `path` is `parent` or lies under it, comparing whole components.
pub fn is_under(path: &str, parent: &str) -> bool {
    let parent = parent.trim_end_matches('/');
    if parent == "." {
        return true;
    }
    let parent = parent.strip_prefix("./").unwrap_or(parent);
    if parent.is_empty() {
        return false;
    }
    path == parent
        || path
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::is_under;

    #[test]
    fn promotion_scope_is_component_wise() {
        assert!(is_under("src/lib.rs", "src"));
        assert!(is_under("src/lib.rs", "src/"));
        assert!(is_under("src/lib.rs", "./src"));
        assert!(is_under("anything", "."));
        assert!(is_under("src", "src"));
        assert!(!is_under("srcs/x", "src"));
        assert!(!is_under("other/src/x", "src"));
        assert!(!is_under("x", ""));
    }
}
