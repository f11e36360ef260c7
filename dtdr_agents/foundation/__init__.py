"""The foundation layer: types, errors, encoders, persistence, the chat protocol, checks."""
