compile_error!("the real clippy ran on forged-toolchain");
