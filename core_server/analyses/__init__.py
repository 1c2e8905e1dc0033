"""TODO analyses"""
