mod codegen;
mod generated;
