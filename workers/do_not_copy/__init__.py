"""Scripts that show a mistake on purpose. A chapter runs each to reproduce its error; do
not copy them into your own code (the chapter beside each shows the fix)."""
