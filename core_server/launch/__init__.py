"""TODO launch"""
