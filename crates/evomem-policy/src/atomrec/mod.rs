//! atomrec (skeleton).
