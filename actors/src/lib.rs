//! Voxline call engine.
