//! Voxline service library.
