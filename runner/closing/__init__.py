"""The closing: the pilot decision, deliverables and their verification, the manifest, the report."""
