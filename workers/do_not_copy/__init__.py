"""Scripts that show a mistake on purpose. Each chapter runs one to reproduce its error; do not
copy them into your own code (the chapter next to each shows the fix)."""
