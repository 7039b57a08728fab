# Sourced by the measuring scripts: install_missing TOOL... installs from Debian each tool
# (package named as its command) that is not on PATH yet.
install_missing() {
  local tool sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  for tool in "$@"; do
    command -v "$tool" >/dev/null || $sudo apt-get install -y "$tool" >/dev/null
  done
}
