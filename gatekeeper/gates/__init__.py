"""The gates: the result gate, the transfer gate, and the commands that sit beside them."""
