"""stalkd.client"""
