//! Calls a deprecated function whose note is full of escape sequences.
#![cfg_attr(not(feature = "strict"), allow(text_direction_codepoint_in_literal))]

include!(concat!(env!("OUT_DIR"), "/gen.rs"));

#[allow(clippy::let_and_return)]
pub fn uses_old() -> i32 {
    old()
}

pub fn finding() -> i32 { return 2; } // [2J]8;;http://evil.examplex]8;;
