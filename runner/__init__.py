"""campaign-console's runner side: it owns the truth of a campaign.

The campaign file model, planning and prices, the background runner and its ledger, stop rules,
process supervision, the training-side helpers and the closing report live here. Nothing in this
package imports Textual; only the training-side helpers import torch, and only when used.
"""

__version__ = "0.1.0"
