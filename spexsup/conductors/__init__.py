"""What a command does beyond one turn: fan-out waves, best-of, the board,
checks, diffs, the doctor, and the maintenance broker."""
