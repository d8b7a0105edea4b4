//! Writers of results: terminal tables, JSON and `.hgrm` files, the live status line.
//! A writer never measures; everything here turns a result document into text or files.
#![deny(unsafe_code)]

pub mod diff;
mod export;
pub mod html;
pub mod table;

pub use export::{
    atomic_write, check_writable_dir, check_writable_file, hgrm_file_name, Exporter, HgrmExporter,
    JsonExporter, ReportError,
};
