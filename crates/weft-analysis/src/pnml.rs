//! PNML import (placeholder).
#[derive(Debug)]
pub struct PnmlError;
