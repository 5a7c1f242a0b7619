"""Where checkpoints live: a local folder or an S3 prefix, behind one small
interface, and the checkpoint layout and manifests on top of it.

Used by both sides: the runtime saves and resumes through it, the control plane
lists checkpoints through it. It imports nothing from either side.
"""
