// Emits escape sequences three ways: a cargo warning (stderr), a deprecation note
// that rustc quotes in a diagnostic's message (stdout JSON), and via lib.rs's source
// line, which carries a raw ESC in a comment (the snippet read on the host).
use std::{env, fs, path::Path};

fn main() {
    println!("cargo:warning=\x1b[31mred\x1b]8;;http://x\x07link\x1b]8;;\x07");
    let out = env::var("OUT_DIR").unwrap();
    let note = "\x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \x1b[2J\u{9b}31m \u{202e}gnp.exe\r\n::error::forged";
    fs::write(
        Path::new(&out).join("gen.rs"),
        format!("#[deprecated(note = {note:?})]\npub fn old() -> i32 {{ 1 }}\n")
            .replace("\\u{1b}", "\u{1b}")
            .replace("\\u{9b}", "\u{9b}")
            .replace("\\u{202e}", "\u{202e}")
            .replace("\\u{7}", "\u{7}"),
    )
    .unwrap();
}
