"""Opt-in callbacks for trainers you do not write the loop of, the way experiment trackers ship
theirs: `hf.CampaignCallback()` for the Hugging Face Trainer, `lightning.campaign_callback()` for
Lightning. Each reports through `campaign_train.metrics` with the trainer's true global step, and
the HF one also announces each checkpoint folder it saved. The libraries are imported only when
a callback is made: importing this package needs neither."""
