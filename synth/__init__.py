"""EvoStreaming's self-evolved trajectories (`streameval synth`, docs/synth.md): a served
VideoLLM classifies each video, asks itself questions, labels which segments hold their
evidence and rolls the relevance out causally into Silent/respond trajectories, written as
an ms-swift conversation dataset for fine-tuning elsewhere."""
