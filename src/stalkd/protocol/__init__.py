"""stalkd.protocol"""
