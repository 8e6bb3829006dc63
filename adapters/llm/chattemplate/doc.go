// Package chattemplate renders a model's chat template (tokenizer_config.json's chat_template).
package chattemplate
