"""stalkd.worker"""
