//! Generates the JavaScript glue for lockscope's web UI from the wasm file rustc produced.
//!
//! `scripts/build-ui` runs it as `lockscope-ui-bindgen <input.wasm> <out-dir>`; it writes
//! `<out-dir>/lockscope_ui.js` and `<out-dir>/lockscope_ui_bg.wasm` for an ES-module page load.
//! It is a workspace tool rather than `wasm-bindgen-cli` because the CLI cannot be installed
//! with `--locked` from the reachable registry; the library is pinned to exactly the
//! `wasm-bindgen` version the UI crate uses, which wasm-bindgen requires.

use std::path::PathBuf;

use anyhow::{bail, Context};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, out_dir] = args.as_slice() else {
        bail!("usage: lockscope-ui-bindgen <input.wasm> <out-dir>");
    };
    let input = PathBuf::from(input);
    let out_dir = PathBuf::from(out_dir);
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&input)
        .out_name("lockscope_ui")
        .web(true)?
        .typescript(false)
        .remove_name_section(true)
        .generate(&out_dir)
        .with_context(|| format!("wasm-bindgen failed on {}", input.display()))?;
    Ok(())
}
