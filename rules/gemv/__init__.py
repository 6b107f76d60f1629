"""Matrix-vector work of a decode loop: its share of GPU time, the bandwidth it reaches, and builds that slow it."""
