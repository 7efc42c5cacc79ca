#!/bin/sh
# `make setup`'s last step: FluidSynth and a General MIDI soundfont for the symbolic players, installed
# with apt-get where it can run (as root, or through sudo without a password). Anywhere else it says in
# one line that they are not installed; the players then use the additive fallback. Never fails the set-up.
has_font() {
    [ -n "$SIGNALCHAIN_SOUNDFONT" ] && [ -f "$SIGNALCHAIN_SOUNDFONT" ] && return 0
    for f in /usr/share/sounds/sf2/FluidR3_GM.sf2 /usr/share/sounds/sf2/default-GM.sf2 /usr/share/soundfonts/*.sf2; do
        [ -f "$f" ] && return 0
    done
    return 1
}
fallback="the symbolic players will use the additive fallback"
if command -v fluidsynth >/dev/null 2>&1 && has_font; then
    echo "fluidsynth: $(command -v fluidsynth) and a GM soundfont are installed (symbolic players)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "fluidsynth: not installed (no apt-get here); $fallback (install fluidsynth and a GM .sf2 by hand)"
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "fluidsynth: not installed (apt-get needs root or sudo without a password); $fallback" \
         "(sudo apt-get install fluidsynth fluid-soundfont-gm)"
    exit 0
fi
log="${TMPDIR:-/tmp}/signalchain-apt-fluidsynth.log"
install() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q fluidsynth fluid-soundfont-gm >>"$log" 2>&1; }
if install || { $SUDO apt-get update -q >>"$log" 2>&1 && install; }; then
    echo "fluidsynth: installed with apt-get (fluidsynth, fluid-soundfont-gm)"
else
    echo "fluidsynth: apt-get install fluidsynth fluid-soundfont-gm failed (see $log); $fallback"
fi
exit 0
