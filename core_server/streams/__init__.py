"""TODO streams"""
