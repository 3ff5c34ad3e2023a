"""tilelab's intermediate representation: tile-op nodes on top of TVM's TIR."""
