"""The command palette's provider: the same actions as the keys, found by name (ctrl+p)."""

from __future__ import annotations

from textual.command import DiscoveryHit, Hit, Hits, Provider

from console.bindings import ACTIONS


class ConsoleActions(Provider):
    """Every console action, run on the main screen (where the selected run is)."""

    def _commands(self):
        main = getattr(self.app, "main_screen", None)
        if main is None:
            return []
        # the action itself, not `run_action`: the palette offers an action even while its key is
        # left out of the footer (the pilot decision before the pilot is over)
        keymap = getattr(self.app, "user_keymap", {}) or {}
        return [
            (help_, getattr(main, f"action_{action}"), f"key: {keymap.get(bid, key)}")
            for bid, key, action, _, help_, _ in ACTIONS
        ]

    async def discover(self) -> Hits:
        for name, callback, key in self._commands():
            yield DiscoveryHit(name, callback, help=key)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, key in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=key)
