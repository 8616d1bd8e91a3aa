/**
 * A terminal screen for the writes of the live view: it applies line feeds,
 * carriage returns, cursor-up, erase-below and cursor visibility, and drops
 * colours, so a test can read what a user would see.
 */
export class Screen {
  lines: Array<string> = [""]
  row = 0
  col = 0
  cursorVisible = true
  write = (text: string) => {
    // eslint-disable-next-line no-control-regex
    const tokens = text.match(/\x1b\[[0-9;?]*[A-Za-z]|[\s\S]/gu) ?? []
    for (const token of tokens) {
      if (token === "\n") {
        this.row++
        this.col = 0
        if (this.lines.length <= this.row) this.lines.push("")
      } else if (token === "\r") {
        this.col = 0
      } else if (token.startsWith("\x1b[")) {
        const code = token.slice(2)
        if (code.endsWith("A")) this.row -= Number(code.slice(0, -1) || 1)
        else if (code === "J") {
          this.lines[this.row] = Array.from(this.lines[this.row]!).slice(0, this.col).join("")
          this.lines.length = this.row + 1
        } else if (code === "?25l") this.cursorVisible = false
        else if (code === "?25h") this.cursorVisible = true
      } else {
        const chars = Array.from(this.lines[this.row]!)
        while (chars.length < this.col) chars.push(" ")
        chars[this.col] = token
        this.lines[this.row] = chars.join("")
        this.col++
      }
    }
  }
  get text() {
    return this.lines.join("\n").replace(/\n+$/, "")
  }
}
