"""A user's own models for packexp: a builder per module, named in conf/model/."""
