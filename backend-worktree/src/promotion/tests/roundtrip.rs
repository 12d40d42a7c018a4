//! Every kind of change survives `git apply` on a fresh clone of the base commit:
//! the tree git builds from the patched clone equals the tree of the workspace.

use workspace_core::boundary::PatchExport;

use crate::changes::ChangeOptions;
use crate::changes::tests::fixture::{Fixture, binary, readme};
use crate::promotion::export_patch;

fn roundtrip(edit: impl FnOnce(&Fixture)) -> PatchExport {
    let fx = Fixture::new();
    edit(&fx);
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert!(!export.patch.is_empty(), "nothing exported");
    let applied = fx.apply_to_fresh_clone(&export.patch);
    assert_eq!(
        applied,
        fx.workspace_tree(&[]),
        "patch:\n{}",
        String::from_utf8_lossy(&export.patch)
    );
    export
}

fn patch_text(export: &PatchExport) -> String {
    String::from_utf8_lossy(&export.patch).into_owned()
}

#[test]
fn promotion_roundtrip_added_file() {
    let export = roundtrip(|fx| fx.write("src/new.rs", b"pub fn two() {}\n"));
    assert!(patch_text(&export).contains("new file mode 100644\n"));
}

#[test]
fn promotion_roundtrip_deleted_file() {
    let export = roundtrip(|fx| fx.remove("doc/remove-me.txt"));
    assert!(patch_text(&export).contains("deleted file mode 100644\n"));
}

#[test]
fn promotion_roundtrip_modified_middle() {
    roundtrip(|fx| {
        fx.write(
            "README.md",
            readme().replace("line 10\n", "ten\n").as_bytes(),
        )
    });
}

#[test]
fn promotion_roundtrip_modified_start() {
    roundtrip(|fx| {
        fx.write(
            "README.md",
            format!("line 0\n{}", &readme()[7..]).as_bytes(),
        )
    });
}

#[test]
fn promotion_roundtrip_modified_end() {
    roundtrip(|fx| {
        fx.write(
            "README.md",
            format!("{}line 21\nline 22\n", readme()).as_bytes(),
        )
    });
}

#[test]
fn promotion_roundtrip_file_without_trailing_newline() {
    let export = roundtrip(|fx| {
        fx.write("notes.txt", b"first\nchanged, still no newline");
        fx.write("README.md", readme().trim_end().as_bytes());
    });
    assert!(patch_text(&export).contains("\\ No newline at end of file\n"));
}

#[test]
fn promotion_roundtrip_trailing_newline_added() {
    roundtrip(|fx| fx.write("notes.txt", b"first\nno newline at end\n"));
}

#[test]
fn promotion_roundtrip_executable_bit_set() {
    let export = roundtrip(|fx| fx.chmod("run.sh", true));
    assert!(patch_text(&export).contains("old mode 100644\nnew mode 100755\n"));
}

#[test]
fn promotion_roundtrip_executable_bit_cleared() {
    roundtrip(|fx| fx.chmod("tool.sh", false));
}

#[test]
fn promotion_roundtrip_executable_bit_and_content() {
    roundtrip(|fx| {
        fx.write("run.sh", b"#!/bin/sh\necho changed\n");
        fx.chmod("run.sh", true);
    });
}

#[test]
fn promotion_roundtrip_exact_rename() {
    let export = roundtrip(|fx| fx.rename("docs/old-name.md", "docs/renamed.md"));
    let text = patch_text(&export);
    assert!(text.contains(
        "similarity index 100%\nrename from docs/old-name.md\nrename to docs/renamed.md\n"
    ));
}

#[test]
fn promotion_roundtrip_binary_added() {
    let export = roundtrip(|fx| fx.write("assets/new.bin", &binary(7, 5000)));
    assert!(patch_text(&export).contains("GIT binary patch\nliteral 5000\n"));
}

#[test]
fn promotion_roundtrip_binary_modified() {
    roundtrip(|fx| {
        let mut content = binary(1, 3000);
        content[100] ^= 0xff;
        content.extend_from_slice(b"tail");
        fx.write("data.bin", &content);
    });
}

#[test]
fn promotion_roundtrip_binary_deleted() {
    roundtrip(|fx| fx.remove("gone.bin"));
}

#[test]
fn promotion_roundtrip_non_utf8_text_is_binary() {
    let export = roundtrip(|fx| fx.write("latin1.txt", b"caf\xe9\n"));
    assert!(patch_text(&export).contains("GIT binary patch"));
}

#[test]
fn promotion_roundtrip_symlink_added() {
    let export = roundtrip(|fx| fx.symlink("src/lib.rs", "lib-link"));
    assert!(patch_text(&export).contains("new file mode 120000\n"));
}

#[test]
fn promotion_roundtrip_symlink_retargeted() {
    roundtrip(|fx| fx.symlink("notes.txt", "link"));
}

#[test]
fn promotion_roundtrip_symlink_deleted() {
    roundtrip(|fx| fx.remove("dead-link"));
}

#[test]
fn promotion_roundtrip_file_replaced_by_symlink() {
    let export = roundtrip(|fx| fx.symlink("README.md", "becomes-link.txt"));
    let text = patch_text(&export);
    assert!(text.contains("deleted file mode 100644\n"));
    assert!(text.contains("new file mode 120000\n"));
}

#[test]
fn promotion_roundtrip_symlink_replaced_by_file() {
    roundtrip(|fx| {
        fx.remove("link");
        fx.write("link", b"now a file\n");
    });
}

#[test]
fn promotion_roundtrip_directory_replaced_by_file() {
    roundtrip(|fx| {
        std::fs::remove_dir_all(fx.ws("doc")).unwrap();
        fx.write("doc", b"a file where a directory was\n");
    });
}

#[test]
fn promotion_roundtrip_names_with_spaces() {
    roundtrip(|fx| {
        fx.write("with space.txt", b"spaced\nmore\n");
        fx.write("new dir/another file.txt", b"x\n");
        fx.rename("docs/old-name.md", "docs/new name.md");
    });
}

#[test]
fn promotion_roundtrip_non_ascii_names() {
    let export = roundtrip(|fx| {
        fx.write("café/naïve file.txt", b"unicode\nchanged\n");
        fx.write("日本/ファイル.txt", b"new\n");
        fx.remove("doc/remove-me.txt");
    });
    assert!(patch_text(&export).contains("\"a/caf\\303\\251/na\\303\\257ve file.txt\""));
}

#[test]
fn promotion_roundtrip_quote_and_backslash_in_names() {
    roundtrip(|fx| {
        fx.write("say \"hi\".txt", b"quoted\n");
        fx.write("back\\slash.txt", b"backslash\n");
        fx.write("tab\there.txt", b"tab\n");
    });
}

#[test]
fn promotion_roundtrip_empty_file_added() {
    let export = roundtrip(|fx| fx.write("empty.txt", b""));
    assert!(patch_text(&export).contains("index 0000000..e69de29\n"));
}

#[test]
fn promotion_roundtrip_file_emptied() {
    roundtrip(|fx| {
        fx.write("empty.txt", b"");
        fx.write("with space.txt", b"");
    });
}

#[test]
fn promotion_roundtrip_all_combined() {
    let export = roundtrip(|fx| {
        fx.write("src/new.rs", b"pub fn two() {}\n");
        fx.remove("doc/remove-me.txt");
        fx.write(
            "README.md",
            format!(
                "line 0\n{}line 21\n",
                readme().replace("line 10\n", "ten\n")
            )
            .as_bytes(),
        );
        fx.write("notes.txt", b"first\nchanged, still no newline");
        fx.chmod("run.sh", true);
        fx.chmod("tool.sh", false);
        fx.rename("docs/old-name.md", "moved/old name.md");
        fx.write("assets/new.bin", &binary(7, 5000));
        fx.write("data.bin", &binary(9, 2000));
        fx.remove("gone.bin");
        fx.symlink("src/lib.rs", "lib-link");
        fx.symlink("notes.txt", "link");
        fx.remove("dead-link");
        fx.symlink("README.md", "becomes-link.txt");
        fx.write("with space.txt", b"spaced\nmore\n");
        fx.write("café/naïve file.txt", b"changed\n");
        fx.write("say \"hi\" \\ back.txt", b"quoted\n");
        fx.write("empty.txt", b"");
        std::fs::create_dir_all(fx.ws("empty/dir")).unwrap();
    });
    assert!(export.changes.len() >= 18, "{:?}", export.changes);
}
