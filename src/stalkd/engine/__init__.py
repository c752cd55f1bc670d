"""stalkd.engine: beanstalkd's job semantics as a pure state machine, and its persisted records."""
